"""MCTS on scripted generators and scorers: golden UCT expansion order and visit counts, PUCT
and priors as pure functions, rollout evaluation, final choices, budgets."""

from __future__ import annotations

import json
import math

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError
from metagen.strategies.budget import Budget
from metagen.strategies.mcts import mcts, puct, softmax_priors, uct
from metagen.strategies.tree import SearchTree

TABLE = {"0": 0.2, "1": 0.6, "10": 0.1, "11": 0.3, "00": 0.9, "01": 0.4,
         "000": 0.8, "001": 0.3}


def _node(tree: dict, name: str) -> dict:
    stack = [tree]
    while stack:
        n = stack.pop()
        if n["step"].split()[:1] == [name]:
            return n
        stack.extend(n["children"])
    raise KeyError(name)


def test_scripted_uct_golden_order_and_visits():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), iterations=4, branching=2, c=1.0)
    # it1 root; it2 "1" (0.6 + sqrt(ln 2)); it3 "0" (0.2 + sqrt(ln 4) > 1/3 + sqrt(ln4 / 3));
    # it4 "0" again then "00" (0.9 beats 0.4)
    assert res.trace["order"] == [0, 2, 1, 5]
    tree = res.trace["tree"]
    assert tree["visits"] == 8
    assert (_node(tree, "0")["visits"], _node(tree, "1")["visits"]) == (5, 3)
    assert _node(tree, "1")["value"] == pytest.approx((0.6 + 0.1 + 0.3) / 3)
    assert res.text == "0\n00\n000 #### 000"
    assert res.scores == [0.8, 0.3] and len(gen.calls) == 4
    json.dumps(res.trace)


def test_scripted_terminal_leaves_are_revisited_without_generation():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    [res] = mcts(gen, ["Q:\n"], ScriptedPRM({"0": 0.1, "1": 0.2, "00": 0.9, "01": 0.1,
                                              "10": 0.0, "11": 0.0}),
                 iterations=10, branching=2)
    assert len(gen.calls) == 3  # root, then both depth-1 nodes; the rest revisit solutions
    assert res.trace["tree"]["visits"] == 2 + 2 + 2 + 7
    assert res.text == "0\n00 #### 00"


def test_final_choices_visits_value_vote():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [by_value] = mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), iterations=4, branching=2,
                      final="value")
    assert by_value.text == "0\n00\n000 #### 000"
    [vote] = mcts(ScriptedStepGenerator(tree_script("Q:\n", depth=3)), ["Q:\n"],
                  ScriptedPRM(TABLE), iterations=4, branching=2, final="vote")
    assert vote.text == "0\n00\n000 #### 000"  # 1 vote each: the first answer by id wins


def test_uct_puct_and_priors_pure():
    t = SearchTree("Q")
    a = t.add(t.root, "a", visits=2, value_sum=1.0, prior=0.25)
    assert uct(a, 8, 1.0) == pytest.approx(0.5 + math.sqrt(math.log(8) / 2))
    assert puct(a, 8, 2.0) == pytest.approx(0.5 + 2.0 * 0.25 * math.sqrt(8) / 3)
    assert uct(t.add(t.root, "b"), 8, 1.0) == math.inf
    assert softmax_priors([-2.0, -4.0], [2, 2]) == pytest.approx(
        [1 / (1 + math.exp(-1)), math.exp(-1) / (1 + math.exp(-1))])
    assert softmax_priors([None, -1.0], [1, 1]) == [0.5, 0.5]


def test_scripted_puct_runs_and_sets_priors():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), iterations=4, branching=2,
                 selection="puct", c=1.5)
    assert all(ch["prior"] == 0.5 for ch in res.trace["tree"]["children"])
    assert res.best is not None


def _rollout_script(prefix: str, i: int) -> str:
    body = prefix.split("Q:\n", 1)[1]
    if not body:
        return f"a{i}\nb\n#### {i}"
    return f"b\n#### {body[1]}" if body.count("\n") == 1 else f"#### {body[1]}"


def test_scripted_rollout_evaluation_with_outcome_reward():
    gen = ScriptedStepGenerator(_rollout_script)
    reward = lambda prompt, text: 1.0 if text.endswith("#### 1") else 0.0  # noqa: E731
    [res] = mcts(gen, ["Q:\n"], None, evaluation="rollout", reward=reward, iterations=3,
                 branching=2)
    first = res.trace["tree"]["children"]
    assert [c["info"]["rollout"] for c in first] == ["b\n#### 0", "b\n#### 1"]
    assert [c["score"] for c in first] == [0.0, 1.0]
    # the rollout call has no step stop and one sample per new child
    prompts, params = gen.calls[1]
    assert prompts == ["Q:\na0\n", "Q:\na1\n"] and "\n" not in params.stop
    assert res.text == "a1\nb\n#### 1"
    assert res.usage.generated_tokens == gen.usage.generated_tokens


def test_scripted_mixed_evaluation():
    gen = ScriptedStepGenerator(_rollout_script)
    prm = ScriptedPRM({"a0": 1.0, "a1": 0.0, "b": 0.5, "####": 0.5})
    reward = lambda prompt, text: 1.0 if text.endswith("#### 1") else 0.0  # noqa: E731
    [res] = mcts(gen, ["Q:\n"], prm, evaluation="mixed", mix=0.25, reward=reward,
                 iterations=1, branching=2)
    assert [c["score"] for c in res.trace["tree"]["children"]] == [0.75, 0.25]


def test_scripted_budget_and_bad_options():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), iterations=10, branching=2,
                 budget=Budget(max_calls=2))
    assert len(gen.calls) == 2 and res.stopped_by_budget
    for kwargs in ({"selection": "ucb"}, {"evaluation": "x"}, {"final": "best"}, {"c": -1},
                   {"mix": 2.0}, {"iterations": 0}):
        with pytest.raises(InvalidParameterError):
            mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), **kwargs)
    with pytest.raises(InvalidParameterError):
        mcts(gen, ["Q:\n"], None)


def test_scripted_unfinished_search_is_completed_by_one_rollout():
    gen = ScriptedStepGenerator(_rollout_script)
    prm = ScriptedPRM({"a0": 0.9, "a1": 0.1, "b": 0.5, "####": 0.7})
    [res] = mcts(gen, ["Q:\n"], prm, iterations=1, branching=2)
    assert res.text == "a0\nb\n#### 0" and res.scores == [0.7]
    chain = res.trace["tree"]["children"][0]["children"]
    assert chain[0]["info"] == {"completion": True} and chain[0]["tokens"] == len("b\n#### 0")
    assert gen.calls[1][0] == ["Q:\na0\n"] and "\n" not in gen.calls[1][1].stop
    assert res.usage.generated_tokens == gen.usage.generated_tokens
    [partial] = mcts(ScriptedStepGenerator(_rollout_script), ["Q:\n"], prm, iterations=1,
                     branching=2, complete=False)
    assert partial.text == "a0\n" and partial.trace["candidate_ids"] == [1, 2]


def test_scripted_parallel_selection_expands_distinct_leaves_in_one_call():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [res] = mcts(gen, ["Q:\n"], ScriptedPRM(TABLE), iterations=2, branching=2, parallel=2,
                 complete=False)
    # iteration 1 reaches only the root; iteration 2 takes "1" and then, with "1" holding a
    # virtual loss, "0": both in one call
    assert [p for p, _ in gen.calls] == [["Q:\n"], ["Q:\n1\n", "Q:\n0\n"]]
    assert res.trace["order"] == [0, 2, 1] and res.trace["tree"]["visits"] == 6
