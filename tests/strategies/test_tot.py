"""Tree of Thoughts on scripted generators and scorers: DFS golden order with pruning and
backtracking, BFS with threshold pruning, the LM value through a scripted score()."""

from __future__ import annotations

import json
import math

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Capabilities
from metagen.strategies.tot import LMStepValue, tree_of_thoughts

TABLE = {"0": 0.6, "1": 0.7, "2": 0.1, "3": 0.4, "10": 0.2, "11": 0.3, "00": 0.9, "01": 0.55,
         "000": 0.8, "001": 0.4, "010": 0.9}


def test_scripted_dfs_prunes_and_backtracks():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = tree_of_thoughts(gen, ["Q:\n"], ScriptedPRM(TABLE), mode="dfs", branching=2,
                             threshold=0.5)
    # "1" first (0.7), both its children fall below 0.5 -> back to "0", then "00" -> solution
    assert res.trace["order"] == [0, 2, 1, 5] and res.trace["backtracks"] == 1
    assert [p for p, _ in gen.calls] == [["Q:\n"], ["Q:\n1\n"], ["Q:\n0\n"], ["Q:\n0\n00\n"]]
    assert res.text == "0\n00\n000 #### 000" and res.trace["candidate_ids"] == [7]
    json.dumps(res.trace)


def test_scripted_dfs_more_solutions_continues_with_the_next_sibling():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = tree_of_thoughts(gen, ["Q:\n"], ScriptedPRM(TABLE), mode="dfs", branching=2,
                             threshold=0.5, n_solutions=2)
    assert res.trace["order"] == [0, 2, 1, 5, 6] and res.trace["backtracks"] == 2
    assert res.text == "0\n01\n010 #### 010"


def test_scripted_bfs_threshold_prunes_below_it():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = tree_of_thoughts(gen, ["Q:\n"], ScriptedPRM(TABLE), mode="bfs", branching=2,
                             breadth=3, threshold=0.5)
    assert gen.calls[1][0] == ["Q:\n1\n", "Q:\n0\n"]  # "3" (0.4) pruned although breadth 3
    assert gen.calls[2][0] == ["Q:\n0\n00\n", "Q:\n0\n01\n"]
    assert res.text == "0\n01\n010 #### 010"


class _ScriptedJudge:
    """Scripted (mock) scoring generator: log p(" Yes") high when the steps contain 'good'."""

    def __init__(self, scoring: bool = True) -> None:
        self.capabilities = Capabilities(prompt_scoring=scoring)
        self.seen: list[list[str]] = []

    def score(self, prompts, continuations):
        self.seen.append(list(prompts))
        return [[math.log(0.8), math.log(0.2)] if "good" in p else
                [math.log(0.1), math.log(0.3)] for p in prompts]


def test_scripted_lm_value():
    judge = _ScriptedJudge()
    value = LMStepValue(judge)
    out = value.score_steps(["Q:\n", "Q:\n"], [["good\n"], ["bad\n"]])
    assert out == [[pytest.approx(0.8)], [pytest.approx(0.25)]]
    assert judge.seen == [["Q:\ngood\n\nIs every step above correct? Answer:",
                           "Q:\nbad\n\nIs every step above correct? Answer:"]]
    assert value.usage.scorer_calls == 1
    with pytest.raises(CapabilityError):
        LMStepValue(_ScriptedJudge(scoring=False))
    with pytest.raises(InvalidParameterError):
        LMStepValue(judge, template="no steps here")


def test_scripted_tot_with_lm_value():
    def script(prefix: str, i: int) -> str:
        body = prefix.split("Q:\n", 1)[1]
        if body.count("\n") >= 1:
            return "#### 1"
        return ["bad\nx", "good\nx"][i]
    gen = ScriptedStepGenerator(script)
    [res] = tree_of_thoughts(gen, ["Q:\n"], LMStepValue(_ScriptedJudge()), mode="bfs",
                             branching=2, breadth=1)
    assert res.text == "good\n#### 1"


def test_bad_mode():
    with pytest.raises(InvalidParameterError):
        tree_of_thoughts(ScriptedStepGenerator(tree_script("Q:\n", 2)), ["Q:\n"],
                         ScriptedPRM({}), mode="mcts")
