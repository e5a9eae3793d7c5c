"""Reward models in the layouts the field ships them (Math-Shepherd step tags, RLHFlow chat turns,
Qwen2.5-Math-PRM separators, generative Yes/No verifiers), each a tiny random-weight model built
here, checked against a plain transformers forward pass written out in each test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.generators.mock import MockGenerator
from metagen.scorers import (PRM_PRESETS, FormattedPRM, HFProcessRewardModel, PRMFormat,
                             load_prm, split_steps)
from metagen.scorers.prm_format import resolve_format
from metagen.strategies import step_beam_search
from tests.scorers.conftest import save_model
from tests.tolerances import SCORE_TOL

TOL = SCORE_TOL
PROMPTS = ["Q: 2+3?", "Q: what is 12 * 4?", "Q: 7-1?"]
STEPS = [["Step 1: 2 + 3 = 5\n", "Step 2: #### 5"],
         ["Step 1: 12 * 4 = 48\n", "Step 2: 48 + 0 = 48\n", "Step 3: #### 48"],
         ["Step 1: #### 6"]]
# A small chat template in the shape of the real ones (turn markers, an end-of-turn token).
TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
GENRM = PRMFormat(kind="generative", good_token="Yes", bad_token="No",
                  template="Question: {prompt}\nAnswer: {response}\nIs the answer correct? ")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory, stories_path) -> Path:
    """The stories260K Llama tokenizer with the real models' single tokens added ("ки" is one
    Mistral piece, "<extra_0>" a Qwen special token) and a chat template."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(stories_path)
    tok.add_tokens(["ки", "<extra_0>", "Yes", "No"])
    tok.chat_template = TEMPLATE
    out = tmp_path_factory.mktemp("prm_tokenizer")
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def causal_path(tmp_path_factory, tokenizer_dir) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=520, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      max_position_embeddings=512, pad_token_id=0, tie_word_embeddings=False,
                      initializer_range=0.2)
    return save_model(LlamaForCausalLM(cfg), tokenizer_dir, tmp_path_factory.mktemp("causal_prm"))


@pytest.fixture(scope="module")
def separator_path(tmp_path_factory, tokenizer_dir) -> Path:
    from transformers import Qwen2Config, Qwen2ForTokenClassification
    torch.manual_seed(4)
    cfg = Qwen2Config(vocab_size=520, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      num_labels=2, pad_token_id=0, initializer_range=0.2)
    return save_model(Qwen2ForTokenClassification(cfg), tokenizer_dir,
                 tmp_path_factory.mktemp("separator_prm"))


def _reference(path: Path, kind: str = "causal"):
    from transformers import (AutoModelForCausalLM, AutoModelForTokenClassification,
                              AutoTokenizer)
    auto = AutoModelForCausalLM if kind == "causal" else AutoModelForTokenClassification
    return AutoTokenizer.from_pretrained(path), auto.from_pretrained(path).eval()


def _max_diff(got: list[list[float]], want: list[list[float]]) -> float:
    assert [len(g) for g in got] == [len(w) for w in want]
    return max(abs(a - b) for g, w in zip(got, want) for a, b in zip(g, w))


def test_math_shepherd_step_tag_matches_transformers(causal_path):
    prm = load_prm(causal_path, format="math-shepherd", batch_size=2)
    assert isinstance(prm, FormattedPRM)
    forwards = []
    prm.model.base_model.register_forward_hook(lambda *_: forwards.append(1))
    got = prm.score_steps(PROMPTS, STEPS)
    assert len(forwards) == 2  # three distinct prompts: two padded batches of at most 2 rows
    tok, model = _reference(causal_path)
    # Math-Shepherd's own recipe: f"{question} {output}", steps "... ки" joined by "\n", the
    # softmax over the (+, -) logits at every step-tag token.
    good, bad = tok.convert_tokens_to_ids(["+", "-"])
    tag = tok.convert_tokens_to_ids("ки")
    want = []
    for q, steps in zip(PROMPTS, STEPS):
        text = f"{q} " + "\n".join(f"{s.strip()} ки" for s in steps)
        ids = torch.tensor([tok(text)["input_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, :, [good, bad]]
        want.append(logits.softmax(-1)[:, :, 0][ids == tag].tolist())
    diff = _max_diff(got, want)
    print(f"math-shepherd max abs diff {diff:.2e}")
    assert diff <= TOL
    assert prm.usage.scorer_calls == 1 and prm.usage.scorer_tokens > 0


def test_rlhflow_chat_turns_match_transformers(causal_path):
    prm = load_prm(causal_path, format="rlhflow-llama3.1-8b-prm", batch_size=3)
    got = prm.score_steps(PROMPTS, STEPS)
    tok, model = _reference(causal_path)
    good, bad = tok.convert_tokens_to_ids(["+", "-"])
    want = []
    for q, steps in zip(PROMPTS, STEPS):
        conv, scores = [], []
        for k, step in enumerate(steps):  # RLHFlow: question + step 1, then one turn per step
            conv.append({"role": "user", "content": f"{q} {step.strip()}" if k == 0
                         else step.strip()})
            ids = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=True,
                                          return_dict=True)["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1, [good, bad]]
            scores.append(logits.softmax(-1)[0].item())  # p(+) over {+, -}
            conv.append({"role": "assistant", "content": "+"})
        want.append(scores)
    diff = _max_diff(got, want)
    print(f"rlhflow max abs diff {diff:.2e}")
    assert diff <= TOL


def test_qwen_separator_two_class_head_matches_transformers(separator_path):
    prm = load_prm(separator_path, format="qwen2.5-math-prm", batch_size=2)
    got = prm.score_steps(PROMPTS, STEPS)
    tok, model = _reference(separator_path, "token")
    sep = tok.convert_tokens_to_ids("<extra_0>")
    system = PRM_PRESETS["qwen2.5-math-prm"].system_prompt
    want = []
    for q, steps in zip(PROMPTS, STEPS):  # Qwen2.5-Math-PRM's own recipe
        messages = [{"role": "system", "content": system}, {"role": "user", "content": q},
                    {"role": "assistant",
                     "content": "<extra_0>".join(s.strip() for s in steps) + "<extra_0>"}]
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():
            probs = model(input_ids=ids).logits.softmax(-1)  # (1, T, 2)
        want.append(probs[0][ids[0] == sep][:, 1].tolist())
    diff = _max_diff(got, want)
    print(f"qwen2.5-math-prm max abs diff {diff:.2e}")
    assert diff <= TOL


def test_generative_verifier_is_yes_over_yes_no_at_the_answer_position(causal_path):
    prm = load_prm(causal_path, format=GENRM)
    completions = ["".join(s) for s in STEPS]
    got = prm.score(PROMPTS, completions)
    per_step = prm.score_steps(PROMPTS, STEPS)
    tok, model = _reference(causal_path)
    yes, no = tok.convert_tokens_to_ids(["Yes", "No"])

    def p_yes(q: str, response: str) -> float:
        text = f"Question: {q}\nAnswer: {response}\nIs the answer correct? "
        with torch.no_grad():
            p = model(input_ids=torch.tensor([tok(text)["input_ids"]])).logits[0, -1].softmax(-1)
        return (p[yes] / (p[yes] + p[no])).item()

    want = [p_yes(q, c) for q, c in zip(PROMPTS, completions)]
    want_steps = [[p_yes(q, "".join(s[:k + 1])) for k in range(len(s))]
                  for q, s in zip(PROMPTS, STEPS)]
    diff = max(_max_diff([got], [want]), _max_diff(per_step, want_steps))
    print(f"generative max abs diff {diff:.2e}")
    assert diff <= TOL
    assert [s[-1] for s in per_step] == pytest.approx(got, abs=TOL)
    assert prm.usage.scorer_calls == 2


def test_chat_message_prompts_go_through_the_models_chat_template(causal_path):
    fmt = PRMFormat(kind="step-tag", template="{prompt}", step_tag="ки")
    prm = load_prm(causal_path, format=fmt)
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": PROMPTS[0]}]
    got = prm.score_steps([messages], [STEPS[0]])[0]
    tok, model = _reference(causal_path)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) \
        + "\n".join(f"{s.strip()} ки" for s in STEPS[0])
    assert text.startswith("<|system|>\nBe brief.</s>\n<|user|>\n")  # not "system: ..." lines
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    good, bad = tok.convert_tokens_to_ids(["+", "-"])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[:, :, [good, bad]]
    want = logits.softmax(-1)[:, :, 0][ids == tok.convert_tokens_to_ids("ки")].tolist()
    assert _max_diff([got], [want]) <= TOL
    # the same prompt as a string, with chat=True, renders identically
    chat = load_prm(causal_path, format=PRMFormat(kind="step-tag", chat=True,
                                                  system_prompt="Be brief."))
    assert chat.score_steps([PROMPTS[0]], [STEPS[0]])[0] == pytest.approx(got, abs=TOL)


@pytest.mark.parametrize("fmt", ["math-shepherd", "rlhflow-llama3.1-8b-prm", "qwen2.5-math-prm",
                                 GENRM])
def test_rows_sharing_a_prompt_share_its_forward_pass_and_score_the_same(
        fmt, causal_path, separator_path):
    path = separator_path if fmt == "qwen2.5-math-prm" else causal_path
    prm = load_prm(path, format=fmt, batch_size=4)
    chains = [STEPS[1], STEPS[1][:2], ["Step 1: 48\n", "#### 48"]]
    shared = prm.score_steps([PROMPTS[1]] * 3, chains)
    shared_tokens = prm.usage.scorer_tokens
    single = [prm.score_steps([PROMPTS[1]], [c])[0] for c in chains]
    assert _max_diff(shared, single) <= TOL
    assert prm.usage.scorer_calls == 4
    # the prompt's tokens are computed once for the three rows, not three times
    assert shared_tokens < prm.usage.scorer_tokens - shared_tokens


def test_score_splits_at_the_declared_delimiter_and_aggregates(causal_path):
    prm = load_prm(causal_path, format="math-shepherd", aggregation="min")
    completion = "".join(STEPS[1])
    steps = prm.score_steps([PROMPTS[1]], [split_steps(completion)])[0]
    assert prm.score([PROMPTS[1]], [completion]) == pytest.approx([min(steps)], abs=1e-9)
    with pytest.raises(InvalidParameterError) as err:
        prm.score([PROMPTS[1]], ["\n\n"])
    assert err.value.param == "completions"


def test_presets_resolve_and_unknown_names_are_refused():
    assert set(PRM_PRESETS) == {"math-shepherd", "rlhflow-llama3.1-8b-prm", "qwen2.5-math-prm"}
    assert resolve_format("math-shepherd").kind == "step-tag"
    assert resolve_format("rlhflow-llama3.1-8b-prm").kind == "chat-turns"
    qwen = resolve_format("qwen2.5-math-prm")
    assert (qwen.kind, qwen.separator, qwen.chat) == ("separator", "<extra_0>", True)
    with pytest.raises(InvalidParameterError) as err:
        resolve_format("math-shepherd-v2")
    assert err.value.param == "format" and "math-shepherd" in str(err.value)
    with pytest.raises(InvalidParameterError) as err:
        PRMFormat(kind="generative", template="{prompt}")
    assert err.value.param == "template"


def test_undeclared_causal_lm_is_a_model_load_error_naming_the_fix(causal_path):
    with pytest.raises(ModelLoadError) as err:
        load_prm(causal_path)
    msg = str(err.value)
    assert "format=" in msg and "math-shepherd" in msg and "PRMFormat(" in msg


def test_layout_mismatches_and_multi_token_labels_are_model_load_errors(causal_path,
                                                                        separator_path):
    with pytest.raises(ModelLoadError, match="ForTokenClassification"):
        load_prm(causal_path, format="qwen2.5-math-prm")
    with pytest.raises(ModelLoadError, match="causal LM"):
        load_prm(separator_path, format="math-shepherd")
    with pytest.raises(ModelLoadError, match="good_token"):
        load_prm(causal_path, format=PRMFormat(kind="step-tag", good_token="correct"))


def test_a_one_label_separator_head_is_refused_at_load(tmp_path, tokenizer_dir):
    """A separator PRM scores softmax(head)[1]: a one-label head fails when loaded, naming the
    label count (it used to load and fail only when scoring)."""
    from transformers import Qwen2Config, Qwen2ForTokenClassification
    cfg = Qwen2Config(vocab_size=520, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      num_labels=1, pad_token_id=0)
    path = save_model(Qwen2ForTokenClassification(cfg), tokenizer_dir, tmp_path)
    with pytest.raises(ModelLoadError, match="2 labels, this one has 1"):
        load_prm(path, format="qwen2.5-math-prm")


def test_todays_token_classifier_prm_still_loads_as_before(prm_path):
    old = HFProcessRewardModel.from_pretrained(prm_path)
    new = load_prm(prm_path)
    assert isinstance(new, HFProcessRewardModel)
    chains = [split_steps("2 + 3 = 5\n#### 5")]
    assert new.score_steps(["Q: 2+3?\n"], chains) == old.score_steps(["Q: 2+3?\n"], chains)


def test_step_beam_search_scripted_with_a_math_shepherd_prm(causal_path):
    prm = load_prm(causal_path, format="math-shepherd")

    def script(prompt: str, i: int) -> str:
        depth = prompt.count("\n")
        return f"so the answer is {i} #### {i}" if depth >= 3 else f"Step {depth}: try {i}\n"

    gen = MockGenerator(script)
    [res] = step_beam_search(gen, ["Q: 2+3?\n"], prm, width=2, branching=2, max_depth=6)
    assert "####" in res.text and res.text.count("\n") == 2
    assert res.usage.scorer_calls == prm.usage.scorer_calls >= 3
    assert all(0.0 < s < 1.0 for s in res.scores)
    # the chosen answer's PRM value is its last step's score, the best among candidates
    chosen = prm.score_steps(["Q: 2+3?\n"], [split_steps(res.text)])[0][-1]
    assert chosen == pytest.approx(max(res.scores), abs=TOL)


@pytest.fixture(scope="module")
def qwen_prm_checkpoint(tmp_path_factory, tokenizer_dir):
    """A folder shaped like Qwen/Qwen2.5-Math-PRM-7B: architectures Qwen2ForProcessRewardModel,
    backbone tensors under ``model.``, head ``score = Linear(H, H) -> ReLU -> Linear(H, 2)``."""
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, Qwen2Config, Qwen2Model
    torch.manual_seed(5)
    cfg = Qwen2Config(vocab_size=520, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      pad_token_id=0, initializer_range=0.2)
    cfg.architectures = ["Qwen2ForProcessRewardModel"]
    backbone = Qwen2Model(cfg).eval()
    head = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    out = tmp_path_factory.mktemp("qwen_prm_ckpt")
    cfg.save_pretrained(out)
    tensors = {f"model.{k}": v.contiguous() for k, v in backbone.state_dict().items()}
    tensors.update({f"score.{k}": v.contiguous() for k, v in head.state_dict().items()})
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(out)
    return out, backbone, head


def test_qwen_process_reward_model_checkpoint_reads_its_mlp_head(qwen_prm_checkpoint):
    path, backbone, head = qwen_prm_checkpoint
    prm = load_prm(path, format="qwen2.5-math-prm", batch_size=2)
    got = prm.score_steps(PROMPTS, STEPS)
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    sep = tok.convert_tokens_to_ids("<extra_0>")
    system = PRM_PRESETS["qwen2.5-math-prm"].system_prompt
    want = []
    for q, steps in zip(PROMPTS, STEPS):
        messages = [{"role": "system", "content": system}, {"role": "user", "content": q},
                    {"role": "assistant",
                     "content": "<extra_0>".join(s.strip() for s in steps) + "<extra_0>"}]
        text = tok.apply_chat_template(messages, tokenize=False)
        ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
        with torch.no_grad():  # Qwen2ForProcessRewardModel.forward: score(model(ids)[0])
            probs = head(backbone(input_ids=ids).last_hidden_state).softmax(-1)
        want.append(probs[0][ids[0] == sep][:, 1].tolist())
    diff = _max_diff(got, want)
    print(f"qwen2.5-math-prm (ProcessRewardModel MLP head) max abs diff {diff:.2e}")
    assert diff <= TOL


def test_good_token_is_the_texts_own_token_word_initial_under_sentencepiece():
    # Mistral's vocabulary holds both "+" and the word-initial "▁+"; Math-Shepherd's card reads
    # encode("+ -")[1:], the word-initial pieces, and so does load_prm.
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from metagen.scorers.formatted_prm import _token_id
    vocab = {"<unk>": 0, "+": 1, "\u2581+": 2, "-": 3, "\u2581-": 4, "\u2581": 5}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="always")
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    assert (_token_id(tok, "+", "good_token"), _token_id(tok, "-", "bad_token")) == (2, 4)


def test_chat_turns_and_generative_chat_render_through_the_template(causal_path):
    from metagen.scorers.prm_render import render_steps
    tok, model = _reference(causal_path)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Q: 7-1?"}]
    rendered = render_steps(resolve_format("rlhflow-llama3.1-8b-prm"), tok, messages,
                            ["6\n", "#### 6"])
    assert rendered.text == tok.apply_chat_template(
        [messages[0], {"role": "user", "content": "Q: 7-1? 6"},
         {"role": "assistant", "content": "+"}, {"role": "user", "content": "#### 6"},
         {"role": "assistant", "content": "+"}], tokenize=False)
    # a generative verifier in chat mode: the filled template is the user turn
    fmt = PRMFormat(kind="generative", good_token="Yes", bad_token="No", chat=True,
                    template="Question: {prompt}\nAnswer: {response}\nIs the answer correct?")
    got = load_prm(causal_path, format=fmt).score(["Q: 7-1?"], ["#### 6"])[0]
    text = tok.apply_chat_template(
        [{"role": "user", "content": "Question: Q: 7-1?\nAnswer: #### 6\nIs the answer correct?"}],
        tokenize=False, add_generation_prompt=True)
    yes, no = tok.convert_tokens_to_ids(["Yes", "No"])
    with torch.no_grad():
        p = model(input_ids=torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
                  ).logits[0, -1].softmax(-1)
    assert got == pytest.approx((p[yes] / (p[yes] + p[no])).item(), abs=TOL)
