"""Voting on MockGenerator (scripted): majority, ties, abstentions, weights, failures."""

from __future__ import annotations

import math

import pytest

from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.mock import MockGenerator
from metagen.strategies import self_consistency, vote, weighted_vote
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import PARAMS, TableReward, comp

KW = {"extract": last_int, "match": same, "params": PARAMS}


def test_vote_pure_function_ties_go_to_first_class():
    assert vote([0, 1, 1, 0, None], [1, 1, 1, 1, 1]) == (0, {0: 2.0, 1: 2.0})
    assert vote([None, None], [1, 1]) == (None, {})
    assert vote([0, 1, 1], [3.0, 1.0, 1.0], "mean") == (0, {0: 3.0, 1: 1.0})


def test_scripted_majority_returns_first_occurrence_of_winner():
    outs = ["#### 7", "#### 5", "no idea", "x #### 05", "#### 7 then 5", "#### 9"]
    res = self_consistency(MockGenerator(outs), "Q", n=6, **KW)
    assert res.trace["answer"] == "5" and res.text == "#### 5"
    assert res.trace["votes"] == {"7": 1.0, "5": 3.0, "9": 1.0}
    assert res.trace["abstained"] == 1
    assert res.scores == [1 / 6, 3 / 6, None, 3 / 6, 3 / 6, 1 / 6]


def test_scripted_tie_is_broken_by_first_appearance():
    res = self_consistency(MockGenerator(["a 3", "b 4", "c 4", "d 3"]), "Q", n=4, **KW)
    assert res.trace["answer"] == "3" and res.text == "a 3"


def test_scripted_no_answers_returns_first_sample():
    res = self_consistency(MockGenerator(["none", "nothing"]), "Q", n=2, **KW)
    assert res.trace["answer"] is None and res.text == "none"


def test_scripted_failures_do_not_vote():
    gen = MockGenerator(["x 1", "x 2", "x 2", "x 1", "x 1"],
                        fault=lambda p, j, c: "timeout" if j in (0, 3) else None)
    res = self_consistency(gen, "Q", n=5, **KW)
    assert res.trace["answer"] == "2" and res.failures == {"timeout": 2}
    assert res.trace["votes"] == {"2": 2.0, "1": 1.0}


def test_scripted_weighted_vote_can_overturn_the_majority_and_picks_best_member():
    outs = ["a 1", "b 1", "c 1", "d 2", "e 2"]
    rm = TableReward({"a 1": 0.1, "b 1": 0.2, "c 1": 0.1, "d 2": 0.3, "e 2": 0.9})
    res = weighted_vote(MockGenerator(outs), "Q", n=5, reward=rm, **KW)
    assert res.trace["answer"] == "2" and res.text == "e 2"
    assert res.trace["votes"] == pytest.approx({"1": 0.4, "2": 1.2})
    assert len(rm.calls) == 1
    assert res.usage.scorer_calls == 1
    mean = weighted_vote(MockGenerator(outs), "Q", n=5, reward=rm, aggregate="mean", **KW)
    assert mean.trace["votes"] == pytest.approx({"1": 0.4 / 3, "2": 0.6})


def test_scripted_weighted_vote_by_length_normalised_probability():
    outs = [comp("a 1", math.log(0.5) * 2, tokens=2), comp("b 2", math.log(0.9) * 4, tokens=4),
            comp("c 1", math.log(0.6), tokens=1)]
    res = weighted_vote(MockGenerator(outs), "Q", n=3, **KW)  # reward="logprob"
    assert res.scores == pytest.approx([0.5, 0.9, 0.6])
    assert res.trace["answer"] == "1" and res.text == "c 1"  # sum 1.1 > 0.9, best member
    res2 = weighted_vote(MockGenerator(outs), "Q", n=3, aggregate="mean", **KW)
    assert res2.trace["answer"] == "2"  # mean 0.55 < 0.9
    with pytest.raises(CapabilityError):
        weighted_vote(MockGenerator(["a 1"]), "Q", n=1, **KW)


def test_scripted_negative_weights_are_refused():
    with pytest.raises(InvalidParameterError, match="non-negative"):
        weighted_vote(MockGenerator(["a 1"]), "Q", n=1, reward=lambda p, c: -1.0, **KW)


def test_keep_top_weights_golden():
    from metagen.strategies.voting import keep_top_weights
    assert keep_top_weights([0.1, 0.9, 0.5, 0.3], 0.5) == [0.0, 0.9, 0.5, 0.0]
    assert keep_top_weights([0.2, 0.5, 0.5, 0.1], 0.25) == [0.0, 0.5, 0.5, 0.0]  # tie kept
    assert keep_top_weights([0.4, 0.1], 0.01) == [0.4, 0.0]  # at least one votes
    assert keep_top_weights([0.4, 0.1], 1.0) == [0.4, 0.1]


def test_scripted_weighted_vote_keep_top_filters_the_least_confident_voters():
    # majority "1" has three weak voters; keeping the top 40 % (2 of 5) leaves only "2" voting
    outs = ["a 1", "b 1", "c 1", "d 2", "e 2"]
    rm = TableReward({"a 1": 0.3, "b 1": 0.3, "c 1": 0.3, "d 2": 0.45, "e 2": 0.4})
    plain = weighted_vote(MockGenerator(outs), "Q", n=5, reward=rm, **KW)
    assert plain.trace["answer"] == "1"
    top = weighted_vote(MockGenerator(outs), "Q", n=5, reward=rm, keep_top=0.4, **KW)
    assert top.trace["answer"] == "2" and top.text == "d 2"
    assert top.scores == pytest.approx([0.3, 0.3, 0.3, 0.45, 0.4])  # raw weights reported
    assert top.trace["voting_weights"] == pytest.approx([0.0, 0.0, 0.0, 0.45, 0.4])
    for bad in (0.0, 1.5, True, "half"):
        with pytest.raises(InvalidParameterError, match="keep_top"):
            weighted_vote(MockGenerator(outs), "Q", n=5, reward=rm, keep_top=bad, **KW)
