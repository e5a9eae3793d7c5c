"""rejection_sampling on MockGenerator (scripted): rounds, acceptance, budgets, failures."""

from __future__ import annotations

import pytest

from metagen.errors import InsufficientSamples
from metagen.generators.mock import MockGenerator
from metagen.strategies import Budget, rejection_sampling
from metagen.types import SamplingParams
from tests.strategies._helpers import PARAMS

OUTS = ["w1", "w2", "w3", "w4", "ok5", "w6", "ok7", "w8", "w9", "w10"]


def accept(prompt, text):
    return text.startswith("ok")


def test_scripted_stops_at_first_accepted_sample_one_call_per_round():
    gen = MockGenerator(OUTS)
    res = rejection_sampling(gen, "Q", accept, batch=2, params=PARAMS)
    assert res.text == "ok5" and res.trace["accepted"] and res.trace["rounds"] == 3
    assert gen.num_calls == 3 and all(c.params.n == 2 for c in gen.calls)
    assert [c.text for c in res.candidates] == ["w1", "w2", "w3", "w4", "ok5", "w6"]


def test_scripted_prompt_list_rounds_shrink_to_waiting_prompts():
    gen = MockGenerator({"A": ["ok", "x"], "B": ["x", "x", "x", "ok"]})
    res = rejection_sampling(gen, ["A", "B"], accept, batch=2, params=PARAMS)
    assert [r.text for r in res] == ["ok", "ok"]
    assert [c.prompts for c in gen.calls] == [["A", "B"], ["B"]]


def test_scripted_max_samples_without_acceptance_returns_best_so_far():
    gen = MockGenerator(["a", "bbb", "cc"])
    res = rejection_sampling(gen, "Q", lambda p, c: len(c) / 10, threshold=0.5, batch=2,
                             max_samples=5, params=PARAMS)
    assert not res.trace["accepted"] and res.text == "bbb"
    assert [c.params.n for c in gen.calls] == [2, 2, 1]


def test_scripted_budget_token_limit_is_never_exceeded():
    gen = MockGenerator(["w a b c d e f g h i"] * 10)  # every sample uses max_tokens=8
    res = rejection_sampling(gen, "Q", accept, batch=3, max_samples=100, params=PARAMS,
                             budget=Budget(max_generated_tokens=40))
    # a round of 3 x 8 = 24 tokens, then room for 16: the scripted backend cannot stop in
    # flight, so the next round's samples get equal shares (16 // 3 = 5 tokens), which cut them
    assert [(c.params.n, c.params.max_tokens) for c in gen.calls] == [(3, 8), (3, 5)]
    assert res.usage.generated_tokens == 24 + 15 <= 40 and res.stopped_by_budget


def test_scripted_budget_max_calls_is_exact():
    gen = MockGenerator(["w"] * 10)
    res = rejection_sampling(gen, "Q", accept, batch=1, max_samples=100, params=PARAMS,
                             budget=Budget(max_calls=3))
    assert gen.num_calls == 3 and res.stopped_by_budget and res.trace["rounds"] == 3


def test_scripted_seeded_rounds_use_successive_seeds():
    gen = MockGenerator(["w"] * 10)
    rejection_sampling(gen, "Q", accept, batch=1, max_samples=3,
                       params=SamplingParams(temperature=1.0, max_tokens=4, seed=11))
    assert [c.params.seed for c in gen.calls] == [11, 12, 13]


def test_scripted_failures_counted_and_all_failed_raises():
    gen = MockGenerator(OUTS, fault=lambda p, j, call: "timeout" if call == 0 else None)
    res = rejection_sampling(gen, "Q", accept, batch=2, params=PARAMS)
    assert res.failures == {"timeout": 2} and res.text == "ok5"
    gen2 = MockGenerator(OUTS, fault=lambda p, j, call: "server_error")
    with pytest.raises(InsufficientSamples) as info:
        rejection_sampling(gen2, "Q", accept, batch=2, max_samples=4, params=PARAMS)
    assert info.value.failures == {"server_error": 4}
