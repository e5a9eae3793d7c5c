"""LikelihoodVerifier against transformers' own log-probabilities (stories260K), its pure
aggregations on golden inputs, and its power on the testbed (slips score lower)."""

from __future__ import annotations

import math
import random

import pytest
import torch

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.scorers import LikelihoodVerifier, confidence, lowest_window_mean

PROMPTS = ["Once upon a time", "Once upon a time", "The dog"]
TEXTS = [", there was a little girl.\nShe was happy.", " a cat sat.\nIt ran away.\nThe end.",
         " ran to the park.\nHe played."]


def _reference_logprobs(path, prompt: str, text: str) -> list[float]:
    """Completion tokens' log-probs from one plain forward pass (no batching, no sharing)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    enc = tok(prompt + text, return_offsets_mapping=True)
    ids = enc["input_ids"]
    start = next(i for i, (a, b) in enumerate(enc["offset_mapping"]) if b > a and a >= len(prompt))
    with torch.no_grad():
        lp = model(input_ids=torch.tensor([ids])).logits[0].log_softmax(-1)  # (T, V)
    return [lp[t - 1, ids[t]].item() for t in range(start, len(ids))]


def test_lowest_window_mean_golden():
    assert lowest_window_mean([0.0, -1.0, -3.0, 0.0], 2) == pytest.approx(-2.0)
    assert lowest_window_mean([-1.0, -2.0], 5) == pytest.approx(-1.5)  # shorter: the mean
    assert lowest_window_mean([-4.0], 1) == -4.0


def test_confidence_modes_golden():
    lps = [-0.1, -2.0, -0.3, -0.2]
    assert confidence(lps, "min") == pytest.approx(math.exp(-2.0))
    assert confidence(lps, "mean") == pytest.approx(math.exp(-2.6 / 4))
    assert confidence(lps, "window", window=2) == pytest.approx(math.exp(-1.15))
    with pytest.raises(InvalidParameterError, match="aggregation"):
        confidence(lps, "max")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="logprobs"):
        confidence([], "min")


@pytest.mark.parametrize("how", ["min", "mean", "window"])
def test_scores_equal_transformers_logprobs(stories_path, how):
    v = LikelihoodVerifier.from_pretrained(stories_path, aggregation=how, window=3, batch_size=2)
    got = v.score(PROMPTS, TEXTS)  # two rows share a prompt: the shared-prefix path too
    for p, t, g in zip(PROMPTS, TEXTS, got):
        assert g == pytest.approx(confidence(_reference_logprobs(stories_path, p, t), how, 3),
                                  rel=1e-4)
    assert v.usage.scorer_calls == 1 and v.usage.scorer_tokens > 0 and v.usage.scorer_flops > 0


def test_step_scores_are_prefix_confidences(stories_path):
    v = LikelihoodVerifier.from_pretrained(stories_path, aggregation="min")
    chains = [[line + "\n" for line in t.split("\n")[:-1]] + [t.split("\n")[-1]] for t in TEXTS]
    steps = v.score_steps(PROMPTS, chains)
    whole = v.score(PROMPTS, TEXTS)
    for per_step, chain, w in zip(steps, chains, whole):
        assert len(per_step) == len(chain)
        assert all(a >= b for a, b in zip(per_step, per_step[1:]))  # min: non-increasing
        assert per_step[-1] == pytest.approx(w, rel=1e-6)
    first = v.score([PROMPTS[0]], [chains[0][0]])[0]  # step 1 = the first line on its own
    assert steps[0][0] == pytest.approx(first, rel=1e-4)


def test_step_logprobs_partition_the_completions_token_logprobs(stories_path):
    """Concatenated, a chain's per-step log-probs are the completion's token log-probs from a
    plain forward pass (batching and the shared prompt pass may differ by float rounding:
    1e-4 relative, as the scores' own test); every step of these chains holds a token."""
    v = LikelihoodVerifier.from_pretrained(stories_path)
    chains = [[line + "\n" for line in t.split("\n")[:-1]] + [t.split("\n")[-1]] for t in TEXTS]
    for p, t, chain in zip(PROMPTS, TEXTS, v.step_logprobs(PROMPTS, chains)):
        assert len(chain) == len(t.split("\n")) and all(chain)
        assert sum(chain, []) == pytest.approx(_reference_logprobs(stories_path, p, t), rel=1e-4,
                                               abs=1e-5)


def test_as_a_prm_outcome_min_over_steps_is_the_verifiers_own_score(stories_path):
    """Why best-of-N by the verifier's step confidence (min over steps) and best-of-N by the
    verifier as ORM choose alike: the weakest token of the whole is the weakest of the steps'."""
    from metagen.scorers.prm_outcome import PRMOutcome

    v = LikelihoodVerifier.from_pretrained(stories_path, aggregation="min")
    assert PRMOutcome(v, "min").score(PROMPTS, TEXTS) == pytest.approx(v.score(PROMPTS, TEXTS),
                                                                       rel=1e-6)


def test_bad_inputs_are_typed_errors(stories_path):
    with pytest.raises(InvalidParameterError, match="window"):
        LikelihoodVerifier.from_pretrained(stories_path, aggregation="window", window=0)
    v = LikelihoodVerifier.from_pretrained(stories_path)
    with pytest.raises(InvalidPromptError, match="completions"):
        v.score(["Once"], [""])
    with pytest.raises(InvalidParameterError):
        v.score(["a", "b"], ["c"])
    with pytest.raises(InvalidParameterError, match="steps"):
        v.score_steps(["Once"], [[]])


def test_testbed_policy_scores_a_slip_below_the_correct_solution():
    """Pairs (reference, the same path with one slip carried forward) of 60 test problems: the
    policy's weakest-token confidence ranks the correct one higher in >= 75 % of pairs. Were
    it uninformative (p = 0.5), P(>= 45 of 60) < 1e-4 (binomial tail)."""
    from metagen.testbed import make_problems, model_path
    from metagen.testbed.corrupt import corrupt_solution
    from metagen.testbed.problems import format_prompt

    path = model_path("policy")
    if not (path / "config.json").is_file():
        pytest.skip("testbed policy not present")
    rng = random.Random(5)
    prompts, good, bad = [], [], []
    for p in make_problems("test", 200, seed=11):
        src = rng.choice(p.solutions)
        wrong = corrupt_solution(src, p.answer, rng)
        if wrong is not None:
            prompts.append(format_prompt(p)); good.append(src); bad.append(wrong[0])
        if len(prompts) == 60:
            break
    v = LikelihoodVerifier.from_pretrained(path, batch_size=64)
    g, b = v.score(prompts, good), v.score(prompts, bad)
    wins = sum(x > y for x, y in zip(g, b))
    assert len(prompts) == 60 and wins >= 45, wins
