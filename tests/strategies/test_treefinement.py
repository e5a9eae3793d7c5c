"""Treefinement on scripted generators and feedback: golden allocation of refinement children,
stop on success / no progress / budget, one call per round for all prompts."""

from __future__ import annotations

import json

import pytest
from tests.strategies._scripted_steps import ScriptedStepGenerator

from metagen.errors import InvalidParameterError
from metagen.strategies.budget import Budget
from metagen.strategies.refine import Feedback
from metagen.strategies.treefinement import treefinement

SCORES = {"a0": 0.0, "a1": 0.5, "a2": 0.9, "a20": 0.3, "a21": 0.95, "a22": 0.1}


def _script(prompt: str, i: int) -> str:
    """First attempts "a<i>"; a refinement of attempt "x" is "x<i>"."""
    if "Revised attempt" not in prompt:
        return f"a{i}"
    parent = prompt.split("Feedback on the attempt above", 1)[0].split(": ", 1)[1].strip()
    return f"{parent}{i}"


def _feedback(prompt: str, attempt: str) -> Feedback:
    score = SCORES.get(attempt, 0.0)
    return Feedback(ok=score >= 0.95, message=f"score {score}", score=score)


def test_scripted_promising_attempts_get_the_refinements():
    gen = ScriptedStepGenerator(_script)
    [res] = treefinement(gen, ["Q: "], _feedback, width=3, temperature=0.1)
    # softmax([0, .5, .9] / .1) * 3 = 0.00, 0.05, 2.95 -> all 3 children to "a2"
    assert [(len(p), c.n) for p, c in gen.calls] == [(1, 3), (1, 3)]
    assert gen.calls[1][0][0].startswith("Q: a2\n\nFeedback on the attempt above:\nscore 0.9")
    tree = res.trace["tree"]
    assert [c["info"]["children_allocated"] for c in tree["children"]] == [0, 0, 3]
    assert res.text == "a21" and res.trace["stop_reason"] == "success"
    assert res.scores == [0.0, 0.5, 0.9, 0.3, 0.95, 0.1]
    json.dumps(res.trace)


def test_scripted_no_progress_and_max_depth():
    gen = ScriptedStepGenerator(_script)
    worse = lambda p, a: Feedback(ok=False, message="no", score=1.0 / len(a))  # noqa: E731
    [res] = treefinement(gen, ["Q: "], worse, width=2, patience=1, max_depth=5)
    assert res.trace["stop_reason"] == "no_progress" and len(gen.calls) == 2
    assert res.text == "a0"  # the best value (1/2), lowest id
    gen = ScriptedStepGenerator(_script)
    better = lambda p, a: Feedback(ok=False, message="", score=float(len(a)))  # noqa: E731
    [res] = treefinement(gen, ["Q: "], better, width=2, max_depth=3)
    assert res.trace["stop_reason"] == "max_depth" and len(gen.calls) == 3


def test_scripted_budget_and_batched_prompts():
    gen = ScriptedStepGenerator(_script)
    res = treefinement(gen, ["A: ", "B: "], _feedback, width=3, temperature=0.1)
    assert [len(p) for p, _ in gen.calls] == [2, 2]  # both prompts in every round
    assert [r.text for r in res] == ["a21", "a21"]
    gen = ScriptedStepGenerator(_script)
    [res] = treefinement(gen, ["Q: "], _feedback, width=3, temperature=0.1,
                         budget=Budget(max_generated_tokens=6))
    assert gen.usage.generated_tokens <= 6 and res.stopped_by_budget
    assert res.trace["stop_reason"] == "budget" and res.text == "a2"
    with pytest.raises(InvalidParameterError):
        treefinement(gen, ["Q: "], _feedback, temperature=-1)
