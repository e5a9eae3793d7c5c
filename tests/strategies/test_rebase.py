"""REBASE on scripted generators and scorers: the allocation rule (pure), golden allocations,
the mixed-count call (n=1 per child, or one call per count when seeded), budgets."""

from __future__ import annotations

import json
import math

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError
from metagen.strategies.budget import Budget
from metagen.strategies.rebase import allocate, rebase
from metagen.types import SamplingParams


def test_allocate_softmax_shares_sum_exactly():
    assert allocate([1.0, 1.0, 1.0], 4, 1.0) == [2, 1, 1]  # remainder ties go to the lower index
    assert allocate([0.9, 0.1], 4, 0.2) == [4, 0]  # softmax(4, 0.5) -> 3.93, 0.07
    shares = [math.exp(x / 0.5) for x in (0.6, 0.3, 0.0)]
    raw = [10 * s / sum(shares) for s in shares]  # 5.41, 2.97, 1.63: floors 5, 2, 1 + 2 left
    assert [round(x, 2) for x in raw] == [5.41, 2.97, 1.63]
    assert allocate([0.6, 0.3, 0.0], 10, 0.5) == [5, 3, 2]
    assert allocate([], 3, 1.0) == [] and allocate([0.2, 0.4], 0, 1.0) == [0, 0]
    for n in range(1, 20):
        assert sum(allocate([0.1, 0.5, 0.3, 0.9], n, 0.3)) == n


def test_scripted_golden_allocation_and_one_call_per_depth():
    table = {"0": 0.9, "1": 0.5, "2": 0.1, "3": 0.0}
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = rebase(gen, ["Q:\n"], ScriptedPRM(table, default=0.5), width=4, temperature=0.2)
    allocs = res.trace["allocations"]
    assert allocs[0] == [[0, 4]]
    # softmax([0.9, 0.5, 0.1, 0.0] / 0.2) * 4 = 3.43, 0.46, 0.06, 0.04 -> 3, 1, 0, 0
    assert allocs[1] == [[1, 3], [2, 1], [3, 0], [4, 0]]
    # depth 2: one call, each prefix once per child with n=1 (no seed)
    prompts, params = gen.calls[1]
    assert prompts == ["Q:\n0\n"] * 3 + ["Q:\n1\n"] and params.n == 1
    assert len(gen.calls) == 3 and len(res.candidates) == 4
    json.dumps(res.trace)


def test_scripted_seeded_mixed_counts_use_one_call_per_count():
    table = {"0": 0.9, "1": 0.5, "2": 0.1, "3": 0.0}
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    rebase(gen, ["Q:\n"], ScriptedPRM(table, default=0.5), width=4, temperature=0.2,
           params=SamplingParams(temperature=1.0, seed=7))
    assert [(p, c.n) for p, c in gen.calls[1:3]] == [(["Q:\n1\n"], 1), (["Q:\n0\n"], 3)]
    # with a seed the three children of "0" are samples 0, 1, 2: all different
    kids = [p for p, _ in gen.calls[3:]]
    assert kids and all(len(set(k)) == len(k) for k in kids)


def test_scripted_finished_solutions_shrink_the_budget():
    def script(prefix: str, i: int) -> str:
        body = prefix.split("Q:\n", 1)[1]
        if not body:
            return ["#### 5", "a\nx", "b\nx"][i % 3]
        return f"#### {6 if body.startswith('a') else 7}"
    gen = ScriptedStepGenerator(script)
    [res] = rebase(gen, ["Q:\n"], ScriptedPRM({"a": 0.9, "b": 0.1, "####": 0.5}), width=3,
                   temperature=1.0, select="score")
    # one solution at depth 1 -> the two others share 2 children
    assert sum(k for _, k in res.trace["allocations"][1]) == 2
    assert len(res.candidates) == 3


def test_scripted_token_budget_and_bad_temperature():
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = rebase(gen, ["A:\n", "B:\n"], ScriptedPRM({}, default=0.5), width=4,
                 budget=Budget(max_generated_tokens=30))
    assert gen.usage.generated_tokens <= 30 and all(r.stopped_by_budget for r in res)
    assert sum(r.usage.generated_tokens for r in res) == gen.usage.generated_tokens
    with pytest.raises(InvalidParameterError):
        rebase(gen, ["A:\n"], ScriptedPRM({}), temperature=0)
