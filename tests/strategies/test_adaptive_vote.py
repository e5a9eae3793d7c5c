"""Adaptive self-consistency: golden values of the stopping rules, and the strategy on
MockGenerator (scripted) against self_consistency, its fixed-budget twin."""

from __future__ import annotations

import math

import pytest

from metagen.errors import InvalidParameterError
from metagen.generators.mock import MockGenerator
from metagen.strategies import adaptive_self_consistency, self_consistency
from metagen.strategies.budget import Budget
from metagen.strategies.stopping import (
    beta_leader_probability,
    samples_needed,
    top_two,
    vote_decided,
    window_unanimous,
)
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import PARAMS

KW = {"extract": last_int, "match": same, "params": PARAMS}


def _beta_tail_by_integration(a: int, b: int, steps: int = 200_000) -> float:
    """P(X > 1/2) for X ~ Beta(a + 1, b + 1) by the midpoint rule (the reference)."""
    norm = math.factorial(a + b + 1) / (math.factorial(a) * math.factorial(b))
    h = 0.5 / steps
    return sum(norm * x ** a * (1 - x) ** b
               for x in (0.5 + (k + 0.5) * h for k in range(steps))) * h


@pytest.mark.parametrize("a,b,golden", [(0, 0, 0.5), (3, 0, 15 / 16), (4, 0, 31 / 32),
                                        (5, 1, 120 / 128), (3, 3, 0.5), (6, 2, 466 / 512)])
def test_beta_leader_probability_golden_values(a, b, golden):
    assert beta_leader_probability(a, b) == pytest.approx(golden, abs=1e-15)
    assert beta_leader_probability(a, b) == pytest.approx(_beta_tail_by_integration(a, b),
                                                          abs=1e-6)


def test_beta_leader_probability_rejects_bad_counts():
    for bad in [(1, 2), (-1, -1), (1.0, 0), (True, 0)]:
        with pytest.raises(InvalidParameterError, match="votes"):
            beta_leader_probability(*bad)


def test_vote_decided_on_golden_vote_counts():
    assert top_two([0, 1, 0, None, 2, 0]) == (3, 1)
    assert not vote_decided([0, 0, 0], "beta")              # 15/16 < 0.95
    assert vote_decided([0, 0, 0, None], "beta", confidence=0.9375)
    assert vote_decided([0, 0, 0, 0], "beta")               # 31/32
    assert not vote_decided([0, 0, 0, 0, 1], "beta")        # P(Bin(6,.5) <= 4) = 57/64 < .95
    assert vote_decided([0, 0, 0, 0, 1], "beta", confidence=0.89)
    assert not vote_decided([None] * 8, "beta")             # nobody voted
    assert window_unanimous([1, 0, 0, 0, 0], 4)
    assert not window_unanimous([0, 0, 0, 1], 4)
    assert not window_unanimous([None] * 4, 4)
    assert not window_unanimous([0, 0], 4)
    with pytest.raises(InvalidParameterError, match="rule"):
        vote_decided([0], "entropy")  # type: ignore[arg-type]


def test_scripted_unanimous_prompt_stops_after_one_round():
    gen = MockGenerator(["x #### 7"] * 16)
    res = adaptive_self_consistency(gen, "Q", n=16, batch=4, **KW)
    assert gen.num_calls == 1 and len(res.candidates) == 4
    assert res.trace["answer"] == "7" and res.trace["decided"] and res.trace["rounds"] == 1
    assert res.usage.generated_tokens == 4 * 3  # "x", "####", "7"


def test_scripted_undecided_vote_draws_n_and_equals_self_consistency():
    outs = ["a 1", "b 2", "c 1", "d 2", "e 3", "f 2", "g 1", "h 2"]
    res = adaptive_self_consistency(MockGenerator(outs), "Q", n=8, batch=3, **KW)
    ref = self_consistency(MockGenerator(outs), "Q", n=8, **KW)
    assert not res.trace["decided"] and res.trace["rounds"] == 3   # 3 + 3 + 2
    assert [c.text for c in res.candidates] == [c.text for c in ref.candidates]
    assert res.text == ref.text and res.trace["votes"] == ref.trace["votes"]
    assert res.scores == ref.scores


def test_scripted_batch_stops_prompts_independently_and_seeds_each_round():
    script = {"easy": ["#### 5"] * 8, "hard": ["#### 1", "#### 2"] * 4}
    gen = MockGenerator(script)
    params = PARAMS.with_(seed=11)
    res = adaptive_self_consistency(gen, ["easy", "hard"], n=8, batch=4,
                                    extract=last_int, match=same, params=params)
    assert [c.prompts for c in gen.calls] == [["easy", "hard"], ["hard"]]
    assert gen.calls[0].params.seed == 11 and gen.calls[1].params.seed not in (11, None)
    assert [len(r.candidates) for r in res] == [4, 8]
    assert [r.trace["decided"] for r in res] == [True, False]
    assert sum(r.usage.generated_tokens for r in res) == gen.usage.generated_tokens


def test_scripted_window_rule_and_failures_do_not_vote():
    gen = MockGenerator(["#### 3"] * 8, fault=lambda p, j, c: "timeout" if c == 0 and j == 0
                        else None)
    res = adaptive_self_consistency(gen, "Q", n=8, batch=2, rule="window", window=3, **KW)
    # round 1: one failure + one vote; round 2: 3 votes in a row -> decided
    assert res.trace["rounds"] == 2 and res.trace["decided"]
    assert res.failures == {"timeout": 1} and len(res.candidates) == 3


def test_scripted_budget_cuts_the_last_round():
    gen = MockGenerator(["a b c d e f g 1", "a b c d e f g 2"] * 8)  # 8 tokens = max_tokens
    res = adaptive_self_consistency(gen, "Q", n=16, batch=4,
                                    budget=Budget(max_generated_tokens=6 * PARAMS.max_tokens),
                                    **KW)
    # a round of 4 x 8 tokens, then 16 left: equal shares of 4 tokens (a scripted backend
    # cannot stop in flight), which cut the round's samples and end the run
    assert [(c.params.n, c.params.max_tokens) for c in gen.calls] == [(4, 8), (4, 4)]
    assert res.stopped_by_budget and len(res.candidates) == 8
    assert res.usage.generated_tokens == 6 * PARAMS.max_tokens


@pytest.mark.parametrize("kw,name", [({"n": 0}, "n"), ({"batch": 0}, "batch"),
                                     ({"confidence": 1.0}, "confidence"),
                                     ({"rule": "nope"}, "rule"), ({"window": 0}, "window")])
def test_bad_options_are_refused_before_any_call(kw, name):
    gen = MockGenerator(["#### 1"])
    with pytest.raises(InvalidParameterError, match=name):
        adaptive_self_consistency(gen, "Q", **{**KW, **kw})
    assert gen.num_calls == 0


def test_samples_needed_replays_the_rounds_on_golden_sequences():
    assert samples_needed([0] * 16, 4, "beta") == 4                       # 4-0: 31/32
    assert samples_needed([0, 1, 0, 0] + [0] * 12, 4, "beta") == 8        # 3-1 no, 7-1 yes
    assert samples_needed([0, 1] * 8, 4, "beta") == 16                    # never decided
    assert samples_needed([0, 1, 3, 3, 3, 3, 2, 2], 2, "window") == 6     # last 4 agree at 6
    assert samples_needed([0, 1, 2, 3, 3, 3, 3, 3], 2, "window") == 8
    assert samples_needed([0, 0, 0], 4, "beta") == 3                      # short: all of them


def test_scripted_strategy_draws_what_samples_needed_predicts():
    outs = ["#### 1", "#### 2", "#### 1", "#### 1", "#### 1", "#### 1", "#### 1", "#### 1",
            "#### 2", "#### 2"]
    res = adaptive_self_consistency(MockGenerator(outs), "Q", n=10, batch=2, **KW)
    classes = [0 if o.endswith("1") else 1 for o in outs]
    assert len(res.candidates) == samples_needed(classes, 2, "beta") == 8   # 7-1: 0.98
