"""Step search under a budget on a real model (stories260K on the built-in engine): a FLOP limit
stops a search step in flight, and each prompt is charged its own tree's requests."""

from __future__ import annotations

import pytest

from metagen.generators.metered import MeteredCall
from metagen.generators.tokenize import encode_prompt
from metagen.strategies import Budget, step_beam_search
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_tokens=64, seed=1)


@pytest.fixture(scope="module")
def gen(stories_path):
    from metagen.generators.local import LocalGenerator
    g = LocalGenerator.from_pretrained(stories_path)
    yield g
    g.close()


class Recording:
    """Passes every call to the real generator and records its prompts (no scripting)."""

    def __init__(self, inner):
        self.inner, self.prompts = inner, []

    capabilities = property(lambda self: self.inner.capabilities)
    usage = property(lambda self: self.inner.usage)

    def generate(self, prompts, params):
        self.prompts.append(list(prompts))
        return self.inner.generate(prompts, params)

    def generate_metered(self, prompts, params, allowance=None) -> MeteredCall:
        self.prompts.append(list(prompts))
        return self.inner.generate_metered(prompts, params, allowance)


def flat_value(prompt, steps):
    return 0.5


def test_flop_budget_stops_a_search_step_in_flight(gen):
    # one step of 2 x 4 samples of up to 64 tokens costs up to ~3e8 FLOPs on stories260K (2.6e5
    # matmul parameters): checked only before each call, the first call would overshoot 2e7
    limit = 2e7
    [res] = step_beam_search(gen, ["Once upon a time"], flat_value, width=2, branching=4,
                             params=PARAMS, budget=Budget(max_flops=limit))
    assert res.stopped_by_budget
    assert 0 < res.usage.flops <= limit  # a plain callable scorer spends no FLOPs


def test_each_prompt_is_charged_its_own_trees_requests(gen):
    prompts = ["Sam saw a big", "One day, a girl named Mia found a shiny stone in the garden"]
    rec = Recording(gen)
    res = step_beam_search(rec, prompts, flat_value, width=2, branching=2, max_depth=3,
                           params=PARAMS)
    want = [0, 0]
    for call in rec.prompts:
        for prefix in call:
            tree = next(i for i, p in enumerate(prompts) if prefix.startswith(p))
            want[tree] += len(encode_prompt(gen.tokenizer, prefix))  # one request per prefix
    assert [r.usage.prompt_tokens for r in res] == want
    batch = res[0].trace["batch_usage"]
    assert sum(r.usage.prompt_tokens for r in res) == batch["prompt_tokens"]
    assert sum(r.usage.calls for r in res) == batch["calls"] == len(rec.prompts)
