"""A PRM as an outcome reward: each completion's lines scored in ONE ``score_steps`` call and
aggregated (scripted PRM)."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.scorers.prm_outcome import PRMOutcome

SAMPLES = ["a 9\n#### 4", "a 3\n#### 6"]
STEP_SCORES = {"a 9\n": 0.1, "#### 4": 0.95, "a 3\n": 0.5, "#### 6": 0.8}


class ScriptedPRM:
    """A score per step text (default 0.5); records every ``score_steps`` call."""

    def __init__(self) -> None:
        self.calls: list = []

    def score_steps(self, prompts, steps):
        self.calls.append([list(chain) for chain in steps])
        return [[STEP_SCORES.get(s, 0.5) for s in chain] for chain in steps]


def test_scripted_prm_outcome_aggregates_min_and_scores_empty_text_as_one_step():
    prm = ScriptedPRM()
    assert PRMOutcome(prm).score(["p"] * 3, SAMPLES + [""]) == [0.1, 0.5, 0.5]
    assert prm.calls == [[["a 9\n", "#### 4"], ["a 3\n", "#### 6"], [""]]]  # one batched call
    assert PRMOutcome(prm, "last").score(["p"], SAMPLES[:1]) == [0.95]
    with pytest.raises(InvalidParameterError, match="aggregation"):
        PRMOutcome(prm, "max")  # type: ignore[arg-type]


def test_a_callable_prm_is_called_per_completion_and_a_single_number_is_the_paths_value():
    seen: list = []

    def per_step(prompt, steps):
        seen.append((prompt, list(steps)))
        return [STEP_SCORES.get(s, 0.5) for s in steps]

    assert PRMOutcome(per_step).score(["p", "q"], SAMPLES) == [0.1, 0.5]
    assert seen == [("p", ["a 9\n", "#### 4"]), ("q", ["a 3\n", "#### 6"])]
    whole = PRMOutcome(lambda prompt, steps: len(steps) / 10)  # one number: the path's value
    assert whole.score(["p", "p"], ["x\ny\nz", "x"]) == [0.3, 0.1]
    with pytest.raises(InvalidParameterError, match="prm"):
        PRMOutcome(object())
