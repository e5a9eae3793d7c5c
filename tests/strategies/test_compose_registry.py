"""Every registered strategy composes (a real model, stories260K; scripted scorers: plain
functions): best-of-N over step beam searches is best-of-N over independent seeded searches,
its usage is everything the searches spent, and an outer budget sees it."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator
from metagen.strategies import (
    Budget,
    StrategyGenerator,
    best_of_n,
    rejection_sampling,
    self_consistency,
    step_beam_search,
)
from metagen.strategies.compose import as_generator
from metagen.strategies.run_generator import RunGenerator
from metagen.strategies.spec import Scorers
from metagen.strategies.step_search import derive_seed
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_tokens=10, seed=11)
PROMPT = "Once upon a time"


def prm(prompt, steps):
    return [1.0 / (1 + len(s) % 5) for s in steps]


def reward(prompt, text):
    return float(len(set(text.split())))


@pytest.fixture(scope="module")
def gen(stories_path):
    from metagen.generators.local import LocalGenerator
    return LocalGenerator.from_pretrained(stories_path)


def test_best_of_n_over_step_beam_search_is_best_of_independent_searches(gen):
    inner = as_generator("step_beam_search", gen, n=4, scorers=Scorers(prm=prm),
                         options={"max_depth": 3})
    assert isinstance(inner, RunGenerator) and isinstance(inner, Generator)
    res = best_of_n(inner, PROMPT, n=3, reward=reward, params=PARAMS)
    searches = [step_beam_search(gen, [PROMPT], prm, width=1, branching=4, max_depth=3,
                                 params=PARAMS.with_(n=1, seed=derive_seed(11, j)))[0]
                for j in range(3)]
    assert [c.text for c in res.candidates] == [s.text for s in searches]
    assert res.text == max(searches, key=lambda s: reward(PROMPT, s.text)).text
    spent = sum(s.usage.generated_tokens for s in searches)
    assert res.usage.generated_tokens == spent == inner.usage.generated_tokens
    assert len({s.text for s in searches}) > 1  # distinct seeds: distinct searches


def test_an_outer_budget_sees_the_inner_runs(gen):
    """Rejection sampling in rounds of one search stops once the searches' tokens reach its
    budget: the first search alone exceeds it, so there is exactly one round."""
    inner = as_generator("step_beam_search", gen, n=2, scorers=Scorers(prm=prm),
                         options={"max_depth": 2})
    res = rejection_sampling(inner, PROMPT, lambda p, t: 0.0, threshold=1.0, batch=1,
                             max_samples=4, params=PARAMS, budget=Budget(max_generated_tokens=1))
    assert res.stopped_by_budget and len(res.candidates) == 1
    assert res.usage.generated_tokens == inner.usage.generated_tokens > 1


def test_parallel_strategies_keep_the_one_call_path(gen):
    inner = as_generator("best_of_n", gen, n=4, scorers=Scorers(reward=reward))
    assert isinstance(inner, StrategyGenerator) and inner.group == 4
    res = self_consistency(inner, PROMPT, n=2, params=PARAMS)
    assert len(res.candidates) == 2


def test_composition_errors_name_the_parameter(gen):
    for call, param in ((lambda: as_generator("best_of_n", gen, n=2), "reward"),
                        (lambda: as_generator("dvts", gen, n=2, options={"widht": 2}), "widht"),
                        (lambda: as_generator("nope", gen, n=2), "strategy"),
                        (lambda: as_generator("dvts", gen, n=0), "n")):
        with pytest.raises(InvalidParameterError) as info:
            call()
        assert info.value.param == param
