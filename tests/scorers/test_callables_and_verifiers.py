"""Plain callables as scorers, score validation, answer-match verification."""

from __future__ import annotations

import math

import pytest

from metagen.errors import InvalidParameterError, NumericalError
from metagen.scorers import AnswerMatch, CallableReward, as_reward, check_scores
from tests.scorers._answers import last_int, same


def test_callable_is_called_per_pair():
    rm = as_reward(lambda p, c: len(p) + len(c))
    assert isinstance(rm, CallableReward)
    assert rm.score(["ab", "c"], ["x", "yz"]) == [3.0, 3.0]


def test_batched_callable_is_called_once():
    calls = []
    rm = CallableReward(lambda ps, cs: calls.append(1) or [1.0] * len(ps), batched=True)
    assert rm.score(["a", "b", "c"], ["x", "y", "z"]) == [1.0, 1.0, 1.0]
    assert calls == [1]


def test_object_with_score_is_used_as_is():
    class R:
        def score(self, prompts, completions):
            return [0.5] * len(prompts)
    r = R()
    assert as_reward(r) is r


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_scores_raise_never_substituted(bad):
    with pytest.raises(NumericalError):
        as_reward(lambda p, c: bad).score(["p"], ["c"])


def test_wrong_count_and_type_raise():
    with pytest.raises(ValueError):
        check_scores([1.0], 2)
    with pytest.raises(TypeError):
        check_scores([True], 1)
    with pytest.raises(TypeError):
        check_scores(["0.5"], 1)


def test_scorer_exception_propagates():
    def boom(p, c):
        raise RuntimeError("reward server down")
    with pytest.raises(RuntimeError, match="down"):
        as_reward(boom).score(["p"], ["c"])


def test_as_reward_rejects_non_callables():
    with pytest.raises(InvalidParameterError):
        as_reward(3)


def test_answer_match_golden():
    v = AnswerMatch({"q1": 5, "q2": 7}, extract=last_int, match=same)
    assert v.score(["q1", "q1", "q2", "q2"], ["so 5", "#### 6", "no answer", "x = 07"]) == \
        [1.0, 0.0, 0.0, 1.0]
    with pytest.raises(KeyError):
        v.score(["q3"], ["5"])
    assert AnswerMatch("3", extract=last_int, match=same).score(["any"], ["1+2=3"]) == [1.0]
