"""Token healing end to end: the built-in engine (LocalGenerator) and transformers (HFGenerator)
give the same tokens, texts and logprobs; a healed mid-word or trailing-space prompt reads as the
natural prompt would; the healed token's logprob is the model's own (checked against a direct
transformers forward pass)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import metagen
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.openai_wire import (
    Dialect, build_request, check_supported, dialect_from_models,
)
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"


@pytest.fixture(scope="module")
def local(stories_path):
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(stories_path) as gen:
        yield gen


def greedy(max_tokens: int, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


@pytest.mark.parametrize("prompt,k", [("Once upon a ti", 1), ("Once upon a ti", 2),
                                      ("Once upon a ", 1), ("Once upon a time", 1),
                                      ("Once upon a time", 3)])
def test_local_equals_hf(local, stories_gen, prompt, k):
    params = greedy(12, token_healing=k, logprobs=2)
    [[a]], [[b]] = local.generate([prompt], params), stories_gen.generate([prompt], params)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.logprobs == pytest.approx(b.logprobs, abs=FLOAT_LOGPROB_TOL)
    assert [set(t) for t in a.top_logprobs] == [set(t) for t in b.top_logprobs]


@pytest.mark.parametrize("gen_name", ["local", "stories_gen"])
@pytest.mark.parametrize("cut", ["Once upon a ti", "Once upon a "])
def test_healed_prompt_reads_as_the_whole_word(gen_name, cut, request):
    """Mid-word and trailing-space prompts: the first token is ``▁time`` and the document is the
    one the natural prompt ``Once upon a time`` gives (the healed token counts in max_tokens)."""
    gen = request.getfixturevalue(gen_name)
    [[healed]] = gen.generate([cut], greedy(11, token_healing=2 if cut.endswith("ti") else 1))
    [[plain]] = gen.generate(["Once upon a time"], greedy(10))
    assert gen.tokenizer.convert_ids_to_tokens([healed.token_ids[0]]) == ["▁time"]
    assert healed.token_ids[1:] == plain.token_ids
    assert cut + healed.text == "Once upon a time" + plain.text


def test_without_healing_the_boundary_is_forced(local):
    [[c]] = local.generate(["Once upon a ti"], greedy(4))
    assert not c.text.startswith("me")  # the reason healing exists, on this model


def test_a_whole_last_token_changes_nothing(local, stories_gen):
    for gen in (local, stories_gen):
        [[healed]] = gen.generate(["Once upon a time"], greedy(13, token_healing=True))
        [[plain]] = gen.generate(["Once upon a time"], greedy(12))
        assert healed.token_ids[1:] == plain.token_ids and healed.text == plain.text


def test_healed_token_logprob_is_the_models_own(local, stories_gen):
    tok = stories_gen.tokenizer
    ids = tok("Once upon a ti")["input_ids"]
    [[c]] = local.generate(["Once upon a ti"], greedy(3, token_healing=2))
    with torch.no_grad():
        logits = stories_gen.model(torch.tensor([ids[:-2]])).logits[0, -1].float()
    want = torch.log_softmax(logits, -1)[c.token_ids[0]].item()
    assert c.logprobs[0] == pytest.approx(want, abs=FLOAT_LOGPROB_TOL)


@pytest.mark.parametrize("gen_name", ["local", "stories_gen"])
def test_every_sample_starts_with_the_removed_text(gen_name, request):
    """n > 1: every sample re-produces the removed ``▁b``, some with a longer token (``▁big``),
    some with ``▁b`` itself and then a free continuation."""
    gen = request.getfixturevalue(gen_name)
    tok = gen.tokenizer
    ids = tok("Lily saw a b")["input_ids"]
    [samples] = gen.generate(["Lily saw a b"], SamplingParams(
        n=8, temperature=1.0, seed=7, max_tokens=6, token_healing=True))
    firsts = set()
    for c in samples:
        whole = tok.decode(ids[:-1] + list(c.token_ids), skip_special_tokens=True)
        assert whole.startswith("Lily saw a b")
        assert whole == "Lily saw a b" + c.text
        firsts.add(tok.convert_ids_to_tokens([c.token_ids[0]])[0])
    assert all(f.startswith("▁b") for f in firsts) and len(firsts) > 1


def test_samples_equal_across_backends(local, stories_gen):
    params = SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=8, token_healing=2)
    [a], [b] = (g.generate(["Once upon a ti"], params) for g in (local, stories_gen))
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert [c.text for c in a] == [c.text for c in b]


@pytest.mark.parametrize("gen_name", ["local", "stories_gen"])
def test_stop_strings_see_the_text_after_the_prompt(gen_name, request):
    gen = request.getfixturevalue(gen_name)
    [[c]] = gen.generate(["Once upon a ti"], greedy(12, token_healing=2, stop=[","]))
    assert c.text == "me" and c.stop_reason == ","
    [[c]] = gen.generate(["Once upon a ti"], greedy(12, token_healing=2, stop=["ti"]))
    assert c.text.startswith("me,")  # the re-produced "ti" is prompt text, not output


def test_speculative_engine_heals_the_same(stories_path, local):
    from metagen.generators.local import LocalGenerator
    params = greedy(12, token_healing=2)
    with LocalGenerator.from_pretrained(stories_path, prompt_lookup=2,
                                        num_speculative_tokens=3) as spec:
        [[a]] = spec.generate(["Once upon a ti"], params)
    [[b]] = local.generate(["Once upon a ti"], params)
    assert a.token_ids == b.token_ids and a.text == b.text


@pytest.mark.parametrize("cut", [1, 3, 7])  # "1", "10 ", "10 - 7 "
def test_testbed_policy_continues_its_own_answer(cut):
    """The policy's greedy answer cut mid-number or after a space, healed, continues to the same
    answer (without healing, the cut after ``10 - 7 `` derails this model: ``7 = 1``)."""
    from metagen.generators.local import LocalGenerator
    from metagen.testbed.problems import format_prompt, make_problems
    prompt = format_prompt(make_problems("test", 1, seed=0)[0])
    with LocalGenerator.from_pretrained(POLICY) as gen:
        [[whole]] = gen.generate([prompt], greedy(12))
        head = whole.text[:cut]
        [[healed]] = gen.generate([prompt + head], greedy(12, token_healing=True))
    assert whole.text == "10 - 7 = 3\n#### 3"
    assert (head + healed.text).startswith(whole.text)


def test_openai_servers_refuse_token_healing_but_metagen_takes_it():
    for name in ("openai", "vllm", "sglang", "llamacpp"):
        with pytest.raises(CapabilityError, match="token_healing"):
            check_supported(SamplingParams(token_healing=True), Dialect(name))
    check_supported(SamplingParams(token_healing=False), Dialect("vllm"))
    check_supported(SamplingParams(token_healing=True), Dialect("metagen"))  # its own server
    _, body = build_request("m", "Once upon a ti", SamplingParams(token_healing=2), 0,
                            Dialect("metagen"))
    assert body["token_healing"] == 2
    assert dialect_from_models({"data": [{"id": "m", "owned_by": "metagen (vllm-compatible)"}]}
                               ).name == "metagen"


def test_an_engine_without_tokenizer_refuses(stories_path):
    from metagen.engine.llm_engine import LLMEngine
    engine = LLMEngine.from_pretrained(stories_path, tokenizer=False)
    with pytest.raises(InvalidParameterError, match="token_healing"):
        engine.add_request([1, 403, 407], SamplingParams(token_healing=True))


def test_stream_yields_the_text_after_the_prompt(local):
    params = greedy(10, token_healing=2)
    [[whole]] = local.generate(["Once upon a ti"], params)
    assert "".join(local.stream("Once upon a ti", params)) == whole.text


def test_beam_search_generator_heals_on_the_engine_and_hf_refuses(local, stories_gen):
    """``token_healing`` reaches the engine's beams through BeamSearchGenerator; transformers'
    beam search cannot heal (nor constrain), and says so rather than ignoring it."""
    from metagen.beam_params import BeamSearchParams
    from metagen.generators.beam import BeamSearchGenerator
    [beams] = BeamSearchGenerator(local, num_beams=3).generate(
        ["Once upon a ti"], SamplingParams(n=3, max_tokens=6, token_healing=2))
    assert len(beams) == 3 and all(c.text.startswith("me") for c in beams)
    for params in (BeamSearchParams(num_beams=2, token_healing=True),
                   BeamSearchParams(num_beams=2, regex="[a-z]+")):
        with pytest.raises(InvalidParameterError) as err:
            stories_gen.beam_search(["Once upon a ti"], params)
        assert err.value.param == ("regex" if params.regex else "token_healing")
