"""End-to-end step search on the testbed: its policy through HFGenerator, its PRM through
HFProcessRewardModel. Skipped until the testbed API and its trained models are in the tree.

Checks the contract on real models (not accuracy, which is measured outside the unit tests):
one generate call per search step for all prompts (plus MCTS's final completion), at least one
PRM call per search step, usage including the PRM's tokens and summing over the prompts, a
token budget that holds, and a JSON trace.
"""

from __future__ import annotations

import importlib
import json

import pytest

from metagen.strategies.budget import Budget
from metagen.strategies.step_scaling import run_step_search
from metagen.strategies.steps import StepDefinition
from metagen.types import SamplingParams

STEPS = StepDefinition(max_step_tokens=48)
PARAMS = SamplingParams(temperature=0.8, seed=0)


@pytest.fixture(scope="module")
def testbed():
    try:
        tb = importlib.import_module("metagen.testbed")
        names = ("model_path", "make_problems", "format_prompt", "grade")
        if not all(hasattr(tb, n) for n in names):
            pytest.skip("metagen.testbed API not available yet")
        missing = [m for m in ("policy", "prm")
                   if not (tb.model_path(m) / "config.json").exists()]
    except Exception as exc:  # the testbed is optional for these tests
        pytest.skip(f"metagen.testbed unusable: {exc}")
    if missing:
        pytest.skip(f"testbed models {missing} not trained/committed")
    from metagen.generators.hf import HFGenerator
    from metagen.scorers.hf_reward import HFProcessRewardModel
    gen = HFGenerator.from_pretrained(tb.model_path("policy"))
    prm = HFProcessRewardModel.from_pretrained(tb.model_path("prm"))
    return tb, gen, prm, tb.make_problems("test", 3, seed=11)


@pytest.mark.parametrize("name", ["step_beam_search", "dvts", "rebase", "mcts"])
def test_search_on_the_testbed(testbed, name):
    tb, gen, prm, problems = testbed
    prompts = [tb.format_prompt(p) for p in problems]
    calls_before, prm_before = gen.usage.calls, prm.usage.scorer_calls
    res = run_step_search(name, gen, prompts, prm, 4, params=PARAMS, steps=STEPS, max_depth=10)
    assert len(res) == len(problems)
    for r, p in zip(res, problems):
        assert r.best is not None
        assert isinstance(tb.grade(r.text, p.answer), bool)
        json.dumps(r.trace)
    steps = res[0].trace["search_steps"]
    made = gen.usage.calls - calls_before
    assert made == steps or (name == "mcts" and made == steps + 1)
    assert prm.usage.scorer_calls - prm_before >= steps
    total = res[0].trace["batch_usage"]
    assert total["scorer_tokens"] > 0
    assert total["generated_tokens"] == sum(r.usage.generated_tokens for r in res)


def test_budget_on_the_testbed(testbed):
    tb, gen, prm, problems = testbed
    prompts = [tb.format_prompt(p) for p in problems]
    before = gen.usage.generated_tokens
    res = run_step_search("step_beam_search", gen, prompts, prm, 8, params=PARAMS, steps=STEPS,
                          budget=Budget(max_generated_tokens=200))
    assert gen.usage.generated_tokens - before <= 200
    assert all(r.stopped_by_budget for r in res)
