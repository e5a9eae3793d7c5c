"""HF reward models against transformers' own forward pass (tiny random Llama heads)."""

from __future__ import annotations

import json

import pytest
import torch

from metagen.errors import ModelLoadError
from metagen.scorers import HFProcessRewardModel, HFRewardModel, split_steps
from tests.tolerances import SCORE_TOL

PROMPTS = ["Q: 2+3?\n", "Q: what is 12 * 4?\n", "Q: 7-1?\n"]
COMPLETIONS = ["2 + 3 = 5\n#### 5", "12 * 4 = 48\n48 + 0 = 48\n#### 48", "#### 6"]


def _reference_orm(path, text):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForSequenceClassification.from_pretrained(path).eval()
    ids = torch.tensor([tok(text)["input_ids"]])
    with torch.no_grad():
        return model(input_ids=ids).logits[0]  # (L,), no padding: the last token


def test_orm_matches_transformers_sequence_classification(orm_path):
    rm = HFRewardModel.from_pretrained(orm_path, batch_size=2)
    got = rm.score(PROMPTS, COMPLETIONS)
    for p, c, g in zip(PROMPTS, COMPLETIONS, got):
        want = torch.sigmoid(_reference_orm(orm_path, p + c)[0]).item()
        assert g == pytest.approx(want, abs=SCORE_TOL)


def test_orm_two_labels_is_softmax_of_label_one(orm2_path):
    rm = HFRewardModel.from_pretrained(orm2_path)
    got = rm.score(PROMPTS[:1], COMPLETIONS[:1])[0]
    want = torch.softmax(_reference_orm(orm2_path, PROMPTS[0] + COMPLETIONS[0]), -1)[1].item()
    assert got == pytest.approx(want, abs=SCORE_TOL)


def test_orm_batched_equals_one_by_one_and_counts_usage(orm_path):
    rm = HFRewardModel.from_pretrained(orm_path, batch_size=3)
    batched = rm.score(PROMPTS, COMPLETIONS)
    single = [rm.score([p], [c])[0] for p, c in zip(PROMPTS, COMPLETIONS)]
    assert batched == pytest.approx(single, abs=SCORE_TOL)
    tokens = sum(len(rm.tokenizer(p + c)["input_ids"]) for p, c in zip(PROMPTS, COMPLETIONS))
    usage = rm.usage
    assert usage.scorer_calls == 1 + 3
    assert usage.scorer_tokens == 2 * tokens
    assert usage.scorer_flops == pytest.approx(2 * rm.n_params * 2 * tokens)


def test_orm_shares_the_prompt_forward_pass_across_samples(orm_path):
    rm = HFRewardModel.from_pretrained(orm_path, batch_size=2)
    comps = ["#### 5", "2 + 3 = 5\n#### 5", "", "2 + 2 = 4\n"]
    shared = rm.score([PROMPTS[0]] * 4, comps)
    for c, g in zip(comps, shared):
        want = torch.sigmoid(_reference_orm(orm_path, PROMPTS[0] + c)[0]).item()
        assert g == pytest.approx(want, abs=SCORE_TOL)
    p = len(rm.tokenizer(PROMPTS[0])["input_ids"])
    tails = sum(len(rm.tokenizer(PROMPTS[0] + c)["input_ids"]) - p for c in comps)
    assert rm.usage.scorer_tokens == 2 * p + tails  # two chunks of 2 rows, one prompt pass each
    assert rm.usage.scorer_calls == 1


def test_prm_step_scores_are_token_logits_at_each_steps_last_token(prm_path):
    from transformers import AutoModelForTokenClassification, AutoTokenizer
    prm = HFProcessRewardModel.from_pretrained(prm_path, batch_size=2)
    steps = [split_steps(c) for c in COMPLETIONS]
    got = prm.score_steps(PROMPTS, steps)
    tok = AutoTokenizer.from_pretrained(prm_path)
    model = AutoModelForTokenClassification.from_pretrained(prm_path).eval()
    for prompt, chain, scores in zip(PROMPTS, steps, got):
        assert len(scores) == len(chain)
        for k in range(len(chain)):
            # the step's last token is the last token of the text up to the end of the step
            ids = tok(prompt + "".join(chain[:k + 1]))["input_ids"]
            full = tok(prompt + "".join(chain))["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([full])).logits[0, :, 0]  # (T,)
            assert scores[k] == pytest.approx(torch.sigmoid(logits[len(ids) - 1]).item(),
                                              abs=SCORE_TOL)


@pytest.mark.parametrize("how", ["last", "min", "prod", "mean"])
def test_prm_as_outcome_reward_aggregates_steps(prm_path, how):
    from metagen.scorers import aggregate_steps
    prm = HFProcessRewardModel.from_pretrained(prm_path, aggregation=how)
    steps = prm.score_steps(PROMPTS, [split_steps(c) for c in COMPLETIONS])
    want = [aggregate_steps(s, how) for s in steps]
    assert prm.score(PROMPTS, COMPLETIONS) == pytest.approx(want, abs=1e-6)


def test_split_steps_only_at_newline():
    assert split_steps("a\nb\u2028c\n") == ["a\n", "b\u2028c\n"]
    assert split_steps("a\nb") == ["a\n", "b"]


def test_value_head_folder(tmp_path, stories_path):
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(3)
    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                      max_position_embeddings=128)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    AutoTokenizer.from_pretrained(stories_path).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights["v_head.summary.weight"] = torch.randn(1, 32)
    weights["v_head.summary.bias"] = torch.randn(1)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    rm = HFRewardModel.from_pretrained(tmp_path)
    model = LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.tensor([rm.tokenizer("Q: hi\nA")["input_ids"]])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state[0, -1]
    want = torch.sigmoid(hidden @ weights["v_head.summary.weight"][0]
                         + weights["v_head.summary.bias"][0]).item()
    assert rm.score(["Q: hi\n"], ["A"])[0] == pytest.approx(want, abs=SCORE_TOL)


def test_missing_or_headless_folder_raises_model_load_error(tmp_path, stories_path):
    with pytest.raises(ModelLoadError):
        HFRewardModel.from_pretrained(tmp_path / "nope")
    cfg = json.loads((stories_path / "config.json").read_text())
    assert "LlamaForCausalLM" in cfg["architectures"]
    with pytest.raises(ModelLoadError, match="value head"):
        HFRewardModel.from_pretrained(stories_path)
