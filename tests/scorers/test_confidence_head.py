"""ConfidenceHeadPRM: its pure features and head on golden inputs, and the head over real LMs
against LikelihoodVerifier (a head that reads only the weakest token is that verifier's
confidence through a sigmoid), folder round trip and resolution, typed errors."""

from __future__ import annotations

import math

import pytest

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.scorers import LikelihoodVerifier, resolve_prm, resolve_reward
from metagen.scorers.confidence_head import (
    FEATURES, ConfidenceHeadPRM, head_score, is_confidence_head, step_features, write_head)

PROMPTS = ["Once upon a time", "The dog"]
CHAINS = [[", there was a little girl.\n", "She was happy."], [" ran to the park.\n", "He played."]]


def test_step_features_golden():
    # steps: [-1, -3], [] (its tokens ended in step 1), [-0.5]
    rows = step_features([[-1.0, -3.0], [], [-0.5]])
    assert rows == [[-3.0, -2.0, -3.0, -2.0], [-3.0, -2.0, -3.0, -2.0],
                    [-3.0, -1.5, -0.5, -0.5]]
    assert len(rows[0]) == len(FEATURES)
    with pytest.raises(InvalidParameterError, match="chain"):
        step_features([[], [-1.0]])


def test_head_score_golden_and_overflow_safe():
    assert head_score([1.0, 2.0], [0.5, -0.25], 0.0) == pytest.approx(0.5)
    assert head_score([math.log(3.0)], [1.0], 0.0) == pytest.approx(0.75)
    assert head_score([1e6], [1.0], 0.0) == 1.0 and head_score([-1e6], [1.0], 0.0) == 0.0


def test_a_run_min_head_is_the_verifiers_confidence_through_a_sigmoid(stories_path):
    """w = (1, 0, 0, 0), b = 0: sigmoid(min logp) = c / (1 + c) with c = exp(min logp), the
    LikelihoodVerifier's step confidence. Both read the same log-probs of the same passes, so
    only the sigmoid's rounding differs (1e-9 relative)."""
    v = LikelihoodVerifier.from_pretrained(stories_path, aggregation="min")
    head = ConfidenceHeadPRM([v], [[1.0, 0.0, 0.0, 0.0]], 0.0)
    got = head.score_steps(PROMPTS, CHAINS)
    want = v.score_steps(PROMPTS, CHAINS)
    for g, w in zip(got, want):
        assert g == pytest.approx([c / (1 + c) for c in w], rel=1e-9)
    assert head.score(PROMPTS, ["".join(c) for c in CHAINS]) == pytest.approx(
        [s[-1] for s in got], rel=1e-9)
    assert head.usage.scorer_flops > 0 and head.usage.scorer_calls >= 2


def test_two_lms_add_their_features_and_their_usage(stories_path):
    a = LikelihoodVerifier.from_pretrained(stories_path)
    b = LikelihoodVerifier.from_pretrained(stories_path)
    w = [0.3, 0.2, -0.1, 0.4]
    one = ConfidenceHeadPRM([a], [[2 * x for x in w]], 0.1).score_steps(PROMPTS, CHAINS)
    two = ConfidenceHeadPRM([a, b], [w, w], 0.1)  # the same LM twice = its weights doubled
    assert sum(two.score_steps(PROMPTS, CHAINS), []) == pytest.approx(sum(one, []), rel=1e-9)
    assert two.usage.scorer_flops == pytest.approx(a.usage.scorer_flops + b.usage.scorer_flops)


def test_the_flop_model_counts_every_lms_pass(stories_path):
    """What the eval runner charges a head's scoring of a sample (no measured usage there):
    the sum of each LM's own FLOP model over the same tokens, exactly (FLOPs are linear in
    both the matmul parameters and layers x attention width)."""
    from metagen.eval.cost import flop_model_of_backend
    from metagen.generators.flops import flop_model_of

    a = LikelihoodVerifier.from_pretrained(stories_path)
    head = ConfidenceHeadPRM([a, a], [[0.0] * 4] * 2, 0.0)
    one = flop_model_of(a.model)
    both = flop_model_of_backend(head)
    assert both is not None
    for prompt, generated in ((0, 1), (17, 40), (300, 5)):
        assert both.sequence(prompt, generated) == pytest.approx(
            2 * one.sequence(prompt, generated), rel=1e-12)


def test_folder_round_trip_and_resolution(stories_path, tmp_path):
    folder = write_head(tmp_path / "head", [str(stories_path)], [[1.0, 0.0, 0.0, 0.0]], 0.0,
                        trained_on={"note": "golden"})
    assert is_confidence_head(folder) and not is_confidence_head(stories_path)
    for scorer in (ConfidenceHeadPRM.from_folder(folder), resolve_prm(str(folder)),
                   resolve_reward(str(folder))):
        assert isinstance(scorer, ConfidenceHeadPRM)
        assert scorer.score_steps(PROMPTS[:1], CHAINS[:1])[0][-1] == pytest.approx(
            ConfidenceHeadPRM.from_folder(folder).score_steps(PROMPTS[:1], CHAINS[:1])[0][-1])


def test_bad_heads_are_typed_errors(stories_path, tmp_path):
    v = LikelihoodVerifier.from_pretrained(stories_path)
    with pytest.raises(InvalidParameterError, match="weights"):
        ConfidenceHeadPRM([v], [[1.0, 0.0]], 0.0)
    with pytest.raises(InvalidParameterError, match="weights"):
        ConfidenceHeadPRM([v], [[1.0, 0.0, 0.0, math.nan]], 0.0)
    with pytest.raises(InvalidParameterError, match="weights"):
        ConfidenceHeadPRM([], [], 0.0)
    bad = write_head(tmp_path / "bad", ["missing-lm"], [[0.0] * 4], 0.0)
    with pytest.raises(ModelLoadError):
        ConfidenceHeadPRM.from_folder(bad)
    (tmp_path / "bad" / "config.json").write_text('{"architectures": ["ConfidenceHeadPRM"]}')
    with pytest.raises(ModelLoadError, match="not a confidence-head folder"):
        ConfidenceHeadPRM.from_folder(tmp_path / "bad")
