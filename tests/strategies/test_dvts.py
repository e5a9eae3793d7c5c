"""DVTS on scripted generators and scorers: independent subtrees, golden tree, one call per
search step (the shared root is asked once with all subtrees' samples), MockGenerator works."""

from __future__ import annotations

import json

from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.generators.mock import MockGenerator
from metagen.strategies.budget import Budget
from metagen.strategies.dvts import dvts
from metagen.strategies.step_beam import step_beam_search

TABLE = {"0": 0.8, "1": 0.9, "2": 0.3, "3": 0.2, "10": 0.2, "11": 0.6, "20": 0.7, "21": 0.1,
         "110": 0.3, "111": 0.4, "200": 0.8, "201": 0.5, "00": 0.95, "000": 0.1, "001": 0.1}


def _groups(node: dict, out: dict) -> dict:
    if node["step"]:
        out[node["step"].split()[0]] = (node["group"], node["pruned"])
    for c in node["children"]:
        _groups(c, out)
    return out


def test_scripted_dvts_golden_tree():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    prm = ScriptedPRM(TABLE)
    [res] = dvts(gen, ["Q:\n"], prm, subtrees=2, branching=2)
    # the root is one prefix with n = subtrees * branching; later each subtree's one beam
    assert [(p, c.n) for p, c in gen.calls] == [
        (["Q:\n"], 4), (["Q:\n1\n", "Q:\n2\n"], 2), (["Q:\n1\n11\n", "Q:\n2\n20\n"], 2)]
    groups = _groups(res.trace["tree"], {})
    assert {k: g for k, (g, _) in groups.items()} == {
        "0": 0, "1": 0, "2": 1, "3": 1, "10": 0, "11": 0, "20": 1, "21": 1,
        "110": 0, "111": 0, "200": 1, "201": 1}
    assert {k for k, (_, pruned) in groups.items() if pruned} == {"0", "3", "10", "21"}
    assert res.text == "2\n20\n200 #### 200"
    assert res.scores == [0.3, 0.4, 0.8, 0.5]
    assert len(prm.calls) == 3
    json.dumps(res.trace)


def test_scripted_dvts_differs_from_beam_search_where_one_path_dominates():
    # beam search (width 2) keeps "1" and "0" (same top scores); DVTS keeps one per subtree
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    [beam] = step_beam_search(gen, ["Q:\n"], ScriptedPRM(TABLE), width=2, branching=2)
    assert gen.calls[1][0] == ["Q:\n1\n", "Q:\n0\n"]
    assert beam.text == "1\n11\n111 #### 111"
    assert not any(c.text.startswith("2\n") for c in beam.candidates)


def test_scripted_dvts_two_prompts_one_call_per_step_and_budget():
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = dvts(gen, ["A:\n", "B:\n"], ScriptedPRM(TABLE), subtrees=2, branching=2)
    assert len(gen.calls) == 3 and gen.calls[0][0] == ["A:\n", "B:\n"]
    assert [r.text for r in res] == ["2\n20\n200 #### 200"] * 2
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = dvts(gen, ["A:\n", "B:\n"], ScriptedPRM(TABLE), subtrees=2, branching=2,
               budget=Budget(max_generated_tokens=20))
    total = sum(r.usage.generated_tokens for r in res)
    assert total == gen.usage.generated_tokens <= 20
    assert all(r.stopped_by_budget for r in res)


def test_mock_generator_backend_dvts():
    # the project's MockGenerator (word tokens) drives the same search
    def script(prompt: str, i: int) -> str:
        body = prompt.split("Q:\n", 1)[1]
        depth = body.count("\n")
        return f"step{depth}{i} ok\nmore" if depth < 2 else f"#### {i}"
    gen = MockGenerator(script)
    [res] = dvts(gen, ["Q:\n"], ScriptedPRM(lambda p, name: float(name[-1:] == "1")),
                 subtrees=2, branching=2)
    assert len(gen.calls) == 3
    assert res.best is not None and "####" in res.text
    assert res.usage.generated_tokens == gen.usage.generated_tokens > 0
