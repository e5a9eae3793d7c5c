"""End-to-end step-level search on a real model (stories260K through HFGenerator).

Steps are sentences (stop "."). Checks: greedy width-1 beam search, best-first and MCTS with one
child per node reproduce plain greedy decoding sentence by sentence (the prefix re-sent as text
continues exactly); sampled search over two prompts makes one generate call per search step with
each prompt's own prefixes; usage equals the tokens recorded in the trees; a real token budget
holds; the model itself as ToT value (LMStepValue via score()).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from metagen.strategies.best_first import best_first
from metagen.strategies.budget import Budget
from metagen.strategies.mcts import mcts
from metagen.strategies.step_beam import step_beam_search
from metagen.strategies.steps import StepDefinition
from metagen.strategies.tot import LMStepValue, tree_of_thoughts
from metagen.types import SamplingParams

SENTENCES = StepDefinition(stop=(".",), max_step_tokens=30, final_marker=None)
GREEDY = SamplingParams(temperature=0.0)


def _length_value(prompt: str, steps: list[str]) -> list[float]:
    """A plain-callable step scorer: prefers sentences of about 40 characters."""
    return [-abs(len(s) - 40) / 40 for s in steps]


class _Counting:
    """Forwards to a real generator and records the prompts of each generate call."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[list[str]] = []

    @property
    def capabilities(self):
        return self.inner.capabilities

    @property
    def usage(self):
        return self.inner.usage

    def generate(self, prompts, params):
        self.calls.append(list(prompts))
        return self.inner.generate(prompts, params)

    def score(self, prompts, continuations):
        return self.inner.score(prompts, continuations)


@pytest.fixture(scope="module")
def stories(stories_path):
    from metagen.generators.hf import HFGenerator
    return HFGenerator.from_pretrained(stories_path)


@pytest.fixture(scope="module")
def greedy_text(stories) -> str:
    out = stories.generate(["Once upon a time"], GREEDY.with_(max_tokens=40))[0][0].text
    assert out.startswith(", there was a little girl named Lily.")
    return out


def test_width1_greedy_searches_equal_plain_greedy(stories, greedy_text):
    expected = "".join(SENTENCES.split(greedy_text)[:3])
    assert expected == (", there was a little girl named Lily. She loved to play outside in "
                        "the park. One day, she saw a big, red ball.")
    kw: dict[str, Any] = {"steps": SENTENCES, "params": GREEDY, "max_depth": 3}
    [beam] = step_beam_search(stories, ["Once upon a time"], _length_value, width=1,
                              branching=1, **kw)
    [bfs] = best_first(stories, ["Once upon a time"], _length_value, branching=1, **kw)
    [tree] = mcts(stories, ["Once upon a time"], _length_value, iterations=3, branching=1, **kw)
    assert beam.text == bfs.text == tree.text == expected


def test_sampled_beam_search_two_prompts(stories):
    gen = _Counting(stories)
    prompts = ["Once upon a time", "Tom had a dog"]
    params = SamplingParams(temperature=1.0, seed=3)
    res = step_beam_search(gen, prompts, _length_value, width=2, branching=2, max_depth=3,
                           steps=SENTENCES, params=params)
    steps = res[0].trace["search_steps"]
    assert len(gen.calls) == steps <= 3  # one batched call per search step
    assert gen.calls[0] == prompts  # the first step: each prompt once, n = width * branching
    for call in gen.calls[1:]:
        assert all(any(p.startswith(q) for q in prompts) for p in call)
    for r, prompt in zip(res, prompts):
        assert r.best is not None and r.candidates
        tree = r.trace["tree"]
        tokens, stack = 0, [tree]
        while stack:
            node = stack.pop()
            tokens += node["tokens"] + node["extra_tokens"]
            stack.extend(node["children"])
            assert node["step"] == "" or node["step"].endswith(".") or node["terminal"]
        assert tokens == r.usage.generated_tokens
        json.dumps(r.trace)
    assert sum(r.usage.generated_tokens for r in res) == res[0].trace["batch_usage"][
        "generated_tokens"]


def test_real_token_budget(stories):
    before = stories.usage.generated_tokens
    res = step_beam_search(stories, ["Once upon a time", "Tom had a dog"], _length_value,
                           width=2, branching=2, max_depth=4, steps=SENTENCES,
                           params=SamplingParams(temperature=1.0, seed=5),
                           budget=Budget(max_generated_tokens=120))
    spent = stories.usage.generated_tokens - before
    assert spent <= 120 and sum(r.usage.generated_tokens for r in res) == spent
    assert all(r.stopped_by_budget for r in res)


def test_tot_with_the_model_as_value(stories):
    value = LMStepValue(stories, template="{prompt}{steps} Was that a happy sentence? Answer:")
    [res] = tree_of_thoughts(stories, ["Once upon a time"], value, mode="bfs", branching=2,
                             breadth=1, max_depth=2, steps=SENTENCES,
                             params=SamplingParams(temperature=1.0, seed=0))
    values = [c["score"] for c in res.trace["tree"]["children"]]
    assert len(values) == 2 and all(0.0 < v < 1.0 for v in values)
    assert res.usage.scorer_calls == 2


def test_engine_prefix_cache_serves_the_steps_so_far(stories, stories_path, greedy_text):
    # on the built-in engine the re-sent "prompt + steps so far" hits the radix cache, and a
    # seeded search grows the same tree as on the transformers backend
    from metagen.generators.local import LocalGenerator
    gen = LocalGenerator.from_pretrained(stories_path)
    [res] = step_beam_search(gen, ["Once upon a time"], _length_value, width=1, branching=1,
                             max_depth=3, steps=SENTENCES, params=GREEDY)
    assert res.text == "".join(SENTENCES.split(greedy_text)[:3])
    assert res.usage.calls == 3 and res.usage.cached_prompt_tokens > 0
    res = step_beam_search(gen, ["Once upon a time", "Tom had a dog"], _length_value, width=2,
                           branching=2, max_depth=2, steps=SENTENCES,
                           params=SamplingParams(temperature=1.0, seed=1))
    usage = res[0].trace["batch_usage"]
    assert usage["calls"] == 2 and usage["cached_prompt_tokens"] > 0
    ref = step_beam_search(stories, ["Once upon a time", "Tom had a dog"], _length_value,
                           width=2, branching=2, max_depth=2, steps=SENTENCES,
                           params=SamplingParams(temperature=1.0, seed=1))
    assert [r.trace["tree"] for r in res] == [r.trace["tree"] for r in ref]
