"""Best-first search on scripted generators and scorers: golden expansion orders for the value
and the depth-aware heuristic, budgets, several prompts per call."""

from __future__ import annotations

import json

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError
from metagen.strategies.best_first import best_first
from metagen.strategies.budget import Budget

TABLE = {"0": 0.5, "1": 0.6, "10": 0.2, "11": 0.3, "00": 0.9, "01": 0.1,
         "000": 0.7, "001": 0.8, "110": 0.4, "111": 0.1}


def test_scripted_value_heuristic_golden_order():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = best_first(gen, ["Q:\n"], ScriptedPRM(TABLE), branching=2)
    # root -> "1" (0.6) -> "0" (0.5 beats 11's 0.3) -> "00" (0.9) -> two solutions
    assert [p for p, _ in gen.calls] == [["Q:\n"], ["Q:\n1\n"], ["Q:\n0\n"], ["Q:\n0\n00\n"]]
    assert res.trace["order"] == [0, 2, 1, 5]
    assert res.text == "0\n00\n001 #### 001" and res.scores == [0.7, 0.8]
    json.dumps(res.trace)


def test_scripted_depth_heuristic_prefers_deeper_nodes():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = best_first(gen, ["Q:\n"], ScriptedPRM(TABLE), branching=2, heuristic="depth",
                       depth_weight=0.3)
    # after "1": "0" has 0.5 + 0.3 = 0.8 < "11" 0.3 + 0.6 = 0.9, so "11" is expanded next
    assert res.trace["order"] == [0, 2, 4]
    assert res.text == "1\n11\n110 #### 110"


def test_scripted_n_solutions_and_max_expansions():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = best_first(gen, ["Q:\n"], ScriptedPRM(TABLE), branching=2, n_solutions=3)
    assert res.trace["order"] == [0, 2, 1, 5, 4]  # then "11" for a third solution
    assert len(res.candidates) == 4
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = best_first(gen, ["Q:\n"], ScriptedPRM(TABLE), branching=2, max_expansions=2)
    assert res.trace["order"] == [0, 2] and res.candidates and res.text == "0\n"


def test_scripted_prompts_share_calls_and_budget_holds():
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = best_first(gen, ["A:\n", "B:\n"], ScriptedPRM(TABLE), branching=2,
                     expansions_per_step=2)
    assert len(gen.calls) == 2 + 1  # root; the two best of each; then the best of each
    assert gen.calls[1][0] == ["A:\n1\n", "A:\n0\n", "B:\n1\n", "B:\n0\n"]
    assert [r.text for r in res] == ["0\n00\n001 #### 001"] * 2
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = best_first(gen, ["A:\n", "B:\n"], ScriptedPRM(TABLE), branching=2,
                     budget=Budget(max_generated_tokens=17))
    assert gen.usage.generated_tokens <= 17 and all(r.stopped_by_budget for r in res)
    assert res[0].trace["order"] == [0, 2]


def test_bad_heuristic():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    with pytest.raises(InvalidParameterError):
        best_first(gen, ["Q:\n"], ScriptedPRM(TABLE), heuristic="astar")
