"""Property tests (hypothesis) on scripted generators and scorers: searching several prompts in
one batch gives each prompt exactly the tree it gets when searched alone (branches of different
prompts are never pooled), every call carries only live prefixes of their own prompts, and a
random token budget is never exceeded."""

from __future__ import annotations

import json
import zlib

from tests.strategies._scripted_steps import ScriptedPRM, ScriptedStepGenerator, tree_script
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.strategies.budget import Budget
from metagen.strategies.step_scaling import run_step_search, step_searches
from metagen.types import SamplingParams

NAMES = sorted(step_searches())
PROMPTS = ["A:\n", "B:\n", "C:\n"]


def _prm(seed: int) -> ScriptedPRM:
    # a pseudo-random but fixed score per (prompt, step name)
    return ScriptedPRM(lambda p, name: zlib.crc32(f"{seed}|{p[0]}|{name}".encode()) % 1000 / 1000)


def _strip(tree: dict) -> dict:
    return {k: (v if k != "children" else [_strip(c) for c in v]) for k, v in tree.items()
            if k not in ("id", "expanded_at")}


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), name=st.sampled_from(NAMES), n=st.integers(1, 6),
       depth=st.integers(2, 4))
def test_scripted_batched_equals_alone(seed, name, n, depth):
    gen = ScriptedStepGenerator(tree_script(":\n", depth=depth))
    # the scripted generator is a pure function of (prefix, sample index), i.e. a seeded backend
    params = SamplingParams(temperature=1.0, seed=seed)
    together = run_step_search(name, gen, PROMPTS, _prm(seed), n, max_depth=6, params=params)
    for call, _ in gen.calls:
        assert all(p[:3] in PROMPTS for p in call)
    for prompt, joint in zip(PROMPTS, together):
        alone_gen = ScriptedStepGenerator(tree_script(":\n", depth=depth))
        [alone] = run_step_search(name, alone_gen, [prompt], _prm(seed), n, max_depth=6,
                                  params=params)
        assert joint.text == alone.text
        assert _strip(joint.trace["tree"]) == _strip(alone.trace["tree"])
        assert joint.scores == alone.scores
    json.dumps([r.trace for r in together])


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), name=st.sampled_from(NAMES), tokens=st.integers(1, 200))
def test_scripted_random_token_budget_is_never_exceeded(seed, name, tokens):
    gen = ScriptedStepGenerator(tree_script(":\n", depth=3))
    res = run_step_search(name, gen, PROMPTS[:2], _prm(seed), 4, max_depth=6,
                          budget=Budget(max_generated_tokens=tokens))
    assert gen.usage.generated_tokens <= tokens
    assert sum(r.usage.generated_tokens for r in res) == gen.usage.generated_tokens
    if gen.usage.generated_tokens == tokens:
        assert all(r.stopped_by_budget for r in res) or all(r.best is not None for r in res)
