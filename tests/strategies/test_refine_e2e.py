"""Refinement loops end to end on a real model (stories260K through HFGenerator), with
programmatic feedback: the chain's prompts carry the feedback, usage matches the generator's,
and the loops stop for the documented reasons."""

from __future__ import annotations

import json

import pytest

from metagen.strategies.budget import Budget
from metagen.strategies.refine import Feedback, refine_with_feedback, self_refine
from metagen.strategies.treefinement import treefinement
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=1.0, seed=0, max_tokens=16)


def _wants_dog(prompt: str, attempt: str) -> Feedback:
    ok = "dog" in attempt
    return Feedback(ok=ok, message="ok" if ok else "Write about a dog.",
                    score=float(ok) - len(attempt) / 1000)


@pytest.fixture(scope="module")
def stories(stories_path):
    from metagen.generators.hf import HFGenerator
    return HFGenerator.from_pretrained(stories_path)


def test_refine_with_feedback_on_a_real_model(stories):
    before = stories.usage
    res = refine_with_feedback(stories, ["Once upon a time", "Tom had a"], _wants_dog,
                               max_attempts=3, params=PARAMS)
    spent = stories.usage - before
    assert sum(r.usage.generated_tokens for r in res) == spent.generated_tokens
    for r in res:
        assert r.trace["stop_reason"] in ("success", "no_progress", "max_attempts")
        assert len(r.trace["chain"]) <= 3 and r.best is not None
        if r.trace["stop_reason"] == "success":
            assert "dog" in r.text
        json.dumps(r.trace)


def test_self_refine_and_treefinement_on_a_real_model(stories):
    [res] = self_refine(stories, ["Once upon a time"], max_attempts=2, params=PARAMS,
                        critique_params=PARAMS)
    assert res.trace["stop_reason"] in ("success", "no_progress", "max_attempts")
    assert all("feedback_tokens" in a for a in res.trace["chain"])
    [tree] = treefinement(stories, ["Once upon a time"], _wants_dog, width=2, max_depth=2,
                          params=PARAMS)
    assert tree.trace["stop_reason"] in ("success", "no_progress", "max_depth")
    assert 2 <= len(tree.candidates) <= 4
    before = stories.usage.generated_tokens
    [cut] = treefinement(stories, ["Once upon a time"], _wants_dog, width=2, max_depth=3,
                         params=PARAMS, budget=Budget(max_generated_tokens=20))
    assert stories.usage.generated_tokens - before <= 20
