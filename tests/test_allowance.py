"""The call allowance (pure): validation, which samples a spent pool stops, FLOPs to tokens, and
what a Budget hands the next call."""

from __future__ import annotations

import time

import pytest

from metagen.allowance import Allowance, samples_to_stop, token_room
from metagen.errors import InvalidParameterError
from metagen.strategies import Budget
from metagen.types import Usage


@pytest.mark.parametrize("kw,name", [({"generated_tokens": -1}, "generated_tokens"),
                                     ({"generated_tokens": 1.5}, "generated_tokens"),
                                     ({"flops": float("nan")}, "flops"),
                                     ({"deadline": -1.0}, "deadline")])
def test_bad_allowance_names_the_parameter(kw, name):
    with pytest.raises(InvalidParameterError) as err:
        Allowance(**kw)
    assert err.value.param == name


def test_samples_to_stop_longest_first_ties_to_the_later():
    assert samples_to_stop([5, 7, 7, 2], [1, 1, 1, 1], 4) == []
    assert samples_to_stop([5, 7, 7, 2], [1, 1, 1, 1], 2) == [2, 1]
    # a sample still to fork its siblings demands for all of them
    assert samples_to_stop([0, 3], [4, 1], 3) == [1, 0]
    assert samples_to_stop([1, 1], [1, 1], 0) == [1, 0]


def test_token_room_pays_the_prefill_first():
    assert token_room(10.0, 11.0, 1.0) == -1
    assert token_room(10.0, 4.0, 2.0) == 3
    assert token_room(10.0, 10.0, 2.0) == 0


def test_budget_hands_the_next_call_what_is_left():
    budget = Budget(max_generated_tokens=100, max_flops=1e6, max_seconds=10.0)
    before = time.monotonic()
    a = budget.allowance(Usage(generated_tokens=30, generator_flops=4e5, scorer_flops=1e5,
                               wall_time=4.0))
    assert a.generated_tokens == 70 and a.flops == 5e5
    assert a.deadline is not None and before + 6.0 <= a.deadline <= time.monotonic() + 6.0
    assert Budget().allowance(Usage()).unlimited
