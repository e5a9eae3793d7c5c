"""run_step_search: every step search runs at a common scale n (scripted generator/scorer)."""

from __future__ import annotations

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import InvalidParameterError
from metagen.strategies.step_scaling import run_step_search, step_search_options, step_searches


def test_options_at_scale():
    assert step_search_options("step_beam_search", 16) == {"width": 4, "branching": 4}
    assert step_search_options("dvts", 2) == {"subtrees": 1, "branching": 2}
    assert step_search_options("rebase", 8) == {"width": 8}
    assert step_search_options("mcts", 8) == {"branching": 4, "iterations": 8}
    assert step_search_options("best_first", 1) == {"branching": 1, "max_expansions": 1}
    assert step_search_options("particle_filtering", 8) == {"particles": 8}
    with pytest.raises(InvalidParameterError):
        step_search_options("beam", 4)
    with pytest.raises(InvalidParameterError):
        step_search_options("dvts", 0)


@pytest.mark.parametrize("name", step_searches())
def test_scripted_every_search_runs_on_two_prompts(name):
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    prm = ScriptedPRM(lambda prompt, step: int(step[-1]) / 10 if step[-1:].isdigit() else 0.0)
    res = run_step_search(name, gen, ["A:\n", "B:\n"], prm, 4, max_depth=5)
    assert len(res) == 2 and all(r.best is not None for r in res)
    assert all("####" in r.text for r in res)
    assert sum(r.usage.generated_tokens for r in res) == gen.usage.generated_tokens
    assert all(len(set(p.split(":")[0] for p in prompts)) <= 2 for prompts, _ in gen.calls)
