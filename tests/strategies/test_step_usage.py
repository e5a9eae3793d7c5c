"""Usage accounting of step search: apportioning a batch's usage (pure), scorer usage deltas
vs plain callables, and PRM input/shape errors."""

from __future__ import annotations

import math

import pytest
from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script

from metagen.errors import MetagenError, NumericalError
from metagen.strategies.step_beam import step_beam_search
from metagen.strategies.step_search import as_step_scorer, choose_by, default_answer, split_usage
from metagen.strategies.tree import SearchTree
from metagen.types import Usage


def test_split_usage_sums_exactly():
    total = Usage(prompt_tokens=7, generated_tokens=10, calls=3, scorer_calls=1, wall_time=1.5,
                  generator_flops=100.0)
    parts = split_usage(total, [1, 1, 2])
    assert [p.generated_tokens for p in parts] == [3, 2, 5]  # 2.5, 2.5, 5 -> remainder to first
    assert [p.calls for p in parts] == [1, 1, 1] and sum(p.prompt_tokens for p in parts) == 7
    assert sum(p.wall_time for p in parts) == pytest.approx(1.5)
    assert [p.generator_flops for p in parts] == [25.0, 25.0, 50.0]
    assert split_usage(Usage(calls=2), [0, 0]) == [Usage(calls=1), Usage(calls=1)]


def test_scorer_usage_delta_and_plain_callables():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    prm = ScriptedPRM({})
    [res] = step_beam_search(gen, ["Q:\n"], prm, width=1, branching=2)
    assert res.usage.scorer_calls == len(prm.calls) == 2
    assert res.usage.scorer_tokens == prm.usage.scorer_tokens > 0
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    [res] = step_beam_search(gen, ["Q:\n"], lambda p, s: 0.5, width=1, branching=2)
    assert res.usage.scorer_calls == 2 and res.scores == [0.5, 0.5]


def test_scorer_failures_raise_and_are_never_scores():
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=2))
    with pytest.raises(NumericalError):
        step_beam_search(gen, ["Q:\n"], lambda p, s: [math.nan] * len(s), width=1)
    with pytest.raises(MetagenError):
        step_beam_search(gen, ["Q:\n"], lambda p, s: [], width=1)
    bad_rows = type("P", (), {"score_steps": lambda self, p, s: [[0.5]]})()
    with pytest.raises(MetagenError):
        step_beam_search(gen, ["Q:\n"], bad_rows, width=1, branching=2)
    with pytest.raises(ValueError):
        as_step_scorer(42)


def test_answers_and_votes():
    assert default_answer("a\n#### 1,234.") == "1234" and default_answer("no answer") is None
    tree = SearchTree("Q")
    a = tree.add(tree.root, "#### 7", score=0.9)
    b = tree.add(tree.root, "#### 5", score=0.2)
    c = tree.add(tree.root, "#### 5", score=0.3)
    d = tree.add(tree.root, "none", score=1.0)
    assert choose_by("score", [a, b, c, d]) is d
    assert choose_by("vote", [a, b, c, d]) is c  # 5 wins 2-1; its best-scored node
    assert choose_by("weighted_vote", [a, b, c, d]) is a  # 0.9 > 0.2 + 0.3
    assert choose_by("vote", [d]) is d  # no answers: by score


def test_seeded_runs_derive_a_fresh_seed_per_call():
    from metagen.strategies.step_search import derive_seed
    from metagen.types import SamplingParams
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    step_beam_search(gen, ["Q:\n"], ScriptedPRM({}), width=1, branching=2,
                     params=SamplingParams(temperature=0.7, seed=7))
    seeds = [p.seed for _, p in gen.calls]
    assert seeds == [7, derive_seed(7, 1), derive_seed(7, 2)] and len(set(seeds)) == 3
    assert all(p.temperature == 0.7 for _, p in gen.calls)
    gen = ScriptedStepGenerator(tree_script("Q:\n", depth=3))
    step_beam_search(gen, ["Q:\n"], ScriptedPRM({}), width=1, branching=2)
    assert all(p.seed is None for _, p in gen.calls)
