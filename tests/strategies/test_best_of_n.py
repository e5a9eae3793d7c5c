"""best_of_n on MockGenerator (scripted): golden picks, one call, failures, budget, usage."""

from __future__ import annotations

import pytest

from metagen.errors import InsufficientSamples, NumericalError
from metagen.generators.mock import MockGenerator
from metagen.strategies import Budget, best_of_n
from tests.strategies._helpers import PARAMS, TableReward

OUTPUTS = ["a b", "c", "d e f", "g", "h i", "j"]
REWARD = {"a b": 0.2, "c": 0.9, "d e f": 0.1, "g": 0.9, "h i": 0.5, "j": 0.0}


def test_scripted_golden_pick_with_tie_to_lowest_index_in_one_call():
    gen = MockGenerator(OUTPUTS)
    rm = TableReward(REWARD)
    res = best_of_n(gen, "Q", n=6, reward=rm, params=PARAMS)
    assert res.text == "c"  # "c" and "g" tie at 0.9: the lower index wins
    assert res.scores == [REWARD[t] for t in OUTPUTS]
    assert [c.text for c in res.candidates] == OUTPUTS
    assert gen.num_calls == 1 and gen.calls[0].params.n == 6
    assert len(rm.calls) == 1 and len(rm.calls[0][1]) == 6
    assert res.trace["ok"] == 6 and res.failures == {} and not res.stopped_by_budget


def test_scripted_usage_adds_generator_and_scorer():
    gen = MockGenerator(OUTPUTS, flops_per_token=2.0)
    rm = TableReward(REWARD)
    res = best_of_n(gen, "Q", n=6, reward=rm, params=PARAMS)
    u = res.usage
    assert u.generated_tokens == 10 and u.prompt_tokens == 6 and u.calls == 1
    assert u.generator_flops == 2.0 * 16
    assert u.scorer_calls == 1 and u.scorer_tokens == 10 and u.scorer_flops == 10.0
    assert u.wall_time > 0


def test_scripted_prompt_list_one_call_and_apportioned_usage():
    script = {"P1": ["x", "y y"], "P2": ["z z z", "w"]}
    gen = MockGenerator(script)
    rm = TableReward({"x": 1, "y y": 2, "z z z": 0, "w": 5})
    res = best_of_n(gen, ["P1", "P2"], n=2, reward=rm, params=PARAMS)
    assert [r.text for r in res] == ["y y", "w"]
    assert gen.num_calls == 1 and gen.calls[0].prompts == ["P1", "P2"]
    assert len(rm.calls) == 1
    assert sum(r.usage.generated_tokens for r in res) == 7
    assert [r.usage.generated_tokens for r in res] == [3, 4]
    assert sum(r.usage.calls for r in res) == 1
    assert res[0].trace["batch_usage"]["generated_tokens"] == 7


def test_scripted_faults_are_excluded_and_reported():
    fault = (lambda p, j, call: "rate_limited" if j in (1, 3) else
             ("timeout" if j == 5 else None))
    gen = MockGenerator(OUTPUTS, fault=fault)
    rm = TableReward(REWARD)
    res = best_of_n(gen, "Q", n=6, reward=rm, params=PARAMS)
    assert res.text == "h i"  # "c" and "g" failed
    assert res.failures == {"rate_limited": 2, "timeout": 1}
    assert res.trace["ok"] == 3 and res.trace["sample_index"] == [0, 2, 4]
    assert rm.calls[0][1] == ["a b", "d e f", "h i"]  # failed samples are never scored


def test_scripted_all_failed_raises_insufficient_samples_and_scores_nothing():
    gen = MockGenerator(OUTPUTS, fault=lambda p, j, call: "server_error")
    rm = TableReward(REWARD)
    with pytest.raises(InsufficientSamples) as info:
        best_of_n(gen, "Q", n=6, reward=rm, params=PARAMS)
    assert info.value.failures == {"server_error": 6}
    assert info.value.partial.best is None
    assert rm.calls == []


def test_scripted_min_successful_below_threshold_carries_partial_results():
    gen = MockGenerator(OUTPUTS, fault=lambda p, j, call: "timeout" if j < 4 else None)
    with pytest.raises(InsufficientSamples) as info:
        best_of_n(gen, "Q", n=6, reward=TableReward(REWARD), params=PARAMS, min_successful=3)
    assert info.value.partial.trace["ok"] == 2


def test_scripted_failed_scorer_is_never_a_score():
    gen = MockGenerator(OUTPUTS)
    with pytest.raises(NumericalError):
        best_of_n(gen, "Q", n=6, reward=lambda p, c: float("nan"), params=PARAMS)


def test_scripted_budget_caps_max_tokens_on_a_backend_without_in_flight_stops():
    gen = MockGenerator(OUTPUTS)  # no generate_metered: the allowance becomes a max_tokens cap
    res = best_of_n(gen, "Q", n=6, reward=TableReward(REWARD), params=PARAMS,
                    budget=Budget(max_generated_tokens=7))
    call = gen.calls[0].params
    assert call.n == 6 and call.max_tokens == 1  # equal shares: 7 // 6
    assert res.stopped_by_budget and res.trace["requested"] == 6
    assert res.usage.generated_tokens == 6 <= 7
    cut = [c for c in res.candidates if c.stop_reason == "budget"]
    assert len(cut) == 3  # "a b", "d e f", "h i" ran into the cap; the one-word ones ended


def test_scripted_budget_without_room_makes_no_call():
    gen = MockGenerator(OUTPUTS)
    res = best_of_n(gen, "Q", n=6, reward=TableReward(REWARD), params=PARAMS,
                    budget=Budget(max_generated_tokens=5))
    assert gen.num_calls == 0 and res.best is None and res.stopped_by_budget
