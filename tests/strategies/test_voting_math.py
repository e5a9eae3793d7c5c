"""Voting on MATH answers through the real strategies (MockGenerator, scripted): distinct
fractions stay distinct, equivalent forms merge, and the MATH answer key never falls back to
GSM8K's "last number"."""

from __future__ import annotations

import pytest

from metagen.generators.mock import MockGenerator
from metagen.strategies import mbr, self_consistency, weighted_vote
from metagen.tasks.math500 import MATH_ANSWER_KEY
from metagen.types import SamplingParams
from tests.strategies._helpers import TableReward

pytest.importorskip("math_verify")

PARAMS = SamplingParams(temperature=1.0, max_tokens=64)
FRACTIONS = [r"so \boxed{\frac{14}{3}}", r"so \boxed{\frac{1}{3}}", r"so \boxed{3}",
             r"so \boxed{\frac{1}{3}}", r"so \boxed{\dfrac{14}{3}}", r"so \boxed{\frac{14}{3}}"]


def test_scripted_self_consistency_keeps_distinct_fractions_distinct():
    res = self_consistency(MockGenerator(FRACTIONS), "Q", n=6, params=PARAMS,
                           answer_key=MATH_ANSWER_KEY)
    assert res.trace["votes"] == {r"\frac{14}{3}": 3.0, r"\frac{1}{3}": 2.0, "3": 1.0}
    assert res.trace["answer"] == r"\frac{14}{3}" and res.text == FRACTIONS[0]


def test_scripted_default_extractor_is_what_merged_them():
    # the GSM8K "last number" default: \frac{14}{3} -> "3", so 14/3 and 3 are one group
    res = self_consistency(MockGenerator(FRACTIONS), "Q", n=6, params=PARAMS)
    assert res.trace["votes"] == {"3": 6.0}


def test_scripted_self_consistency_merges_equivalent_forms():
    outs = [r"\boxed{\frac{1}{3}}", r"\boxed{\frac{1}{2}}", r"\boxed{0.5}", r"\boxed{1/2}",
            r"\boxed{\frac{1}{3}}", "I give up", r"\boxed{\dfrac12}"]
    res = self_consistency(MockGenerator(outs), "Q", n=7, params=PARAMS,
                           answer_key=MATH_ANSWER_KEY)
    assert res.trace["votes"] == {r"\frac{1}{3}": 2.0, r"\frac{1}{2}": 4.0}
    assert res.trace["abstained"] == 1 and res.text == outs[1]


def test_scripted_tuples_and_intervals():
    outs = [r"\boxed{(3,\frac{\pi}{2})}", r"\boxed{\left( 3, \frac{\pi}{2} \right)}",
            r"\boxed{(3,2)}", r"\boxed{(1,2]}", r"\boxed{(1,2)}", r"\boxed{(3,\pi/2)}"]
    res = self_consistency(MockGenerator(outs), "Q", n=6, params=PARAMS,
                           answer_key=MATH_ANSWER_KEY)
    assert res.trace["votes"] == {r"(3,\frac{\pi}{2})": 3.0, "(3,2)": 1.0, "(1,2]": 1.0,
                                  "(1,2)": 1.0}


def test_scripted_weighted_vote_keeps_fractions_apart_and_merges_forms():
    outs = [r"\boxed{\frac{14}{3}}", r"\boxed{3}", r"\boxed{\frac{1}{3}}", r"\boxed{0.5}",
            r"\boxed{\frac{1}{2}}"]
    reward = TableReward({outs[0]: 0.5, outs[1]: 0.6, outs[2]: 0.4, outs[3]: 0.35, outs[4]: 0.3})
    res = weighted_vote(MockGenerator(outs), "Q", n=5, reward=reward, params=PARAMS,
                        answer_key=MATH_ANSWER_KEY)
    assert res.trace["votes"] == pytest.approx(
        {r"\frac{14}{3}": 0.5, "3": 0.6, r"\frac{1}{3}": 0.4, "0.5": 0.65})
    assert res.trace["answer"] == "0.5" and res.text == outs[3]


def test_scripted_mbr_answer_key_selects_what_self_consistency_selects():
    gen = MockGenerator(FRACTIONS)
    res = mbr(gen, "Q", n=6, params=PARAMS, answer_key=MATH_ANSWER_KEY)
    assert res.text == FRACTIONS[0]
    assert res.scores == pytest.approx([3 / 6, 2 / 6, 1 / 6, 2 / 6, 3 / 6, 3 / 6])
