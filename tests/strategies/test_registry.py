"""The strategy registry: every strategy registered once, its spec consistent with its library
function, options checked with errors naming the key, and ``spec.run`` equal to the library call
it stands for (a real model, stories260K; scripted scorers: plain functions)."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import metagen
import metagen.strategies as strategies
from metagen.errors import InvalidParameterError
from metagen.feedback import Feedback
from metagen.strategies.registry import get, names, specs, strategy_exports
from metagen.strategies.spec import FAMILIES, Scorers
from metagen.types import SamplingParams

# the strategy functions of the library (the survey's map); the registry must hold every one
LIBRARY = {"best_of_n", "self_consistency", "weighted_vote", "mbr", "rejection_sampling",
           "adaptive_self_consistency", "deepconf", "step_beam_search", "dvts", "best_first",
           "tree_of_thoughts", "mcts", "rebase", "particle_filtering", "self_refine",
           "refine_with_feedback", "treefinement"}


def test_every_library_strategy_is_registered_and_exported():
    assert LIBRARY <= set(strategy_exports())
    for name, function in strategy_exports().items():
        assert getattr(metagen, name) is function and name in metagen.__all__
        assert getattr(strategies, name) is function and name in strategies.__all__
    with pytest.raises(AttributeError):
        metagen.no_such_strategy  # noqa: B018


def test_specs_are_ordered_by_family():
    families = [spec.family for spec in specs().values()]
    assert families == sorted(families, key=FAMILIES.index)
    assert set(names(family="subsampled")) >= {"best_of_n", "self_consistency", "mbr"}


@pytest.mark.parametrize("name", list(specs()))
def test_spec_matches_its_function(name):
    """Every config field, derived knob, fixed default and scorer keyword is a parameter of the
    library function, and a config default that is not None is the function's own default
    (None: derived from N, or left to the function)."""
    spec = specs()[name]
    signature = inspect.signature(spec.function).parameters
    for f in dataclasses.fields(spec.config):
        assert f.name in signature, f"{name}: config field {f.name} is not a parameter"
        assert f.metadata.get("doc"), f"{name}.{f.name} has no doc"
        if f.default is not None:
            assert f.default == signature[f.name].default, f"{name}.{f.name}"
    for key in [*spec.scale(4), *spec.defaults, *spec.scorer_args.values()]:
        assert key in signature, f"{name}: {key} is not a parameter"
    assert spec.summary and spec.label


def test_options_are_checked_naming_the_key():
    spec = get("step_beam_search")
    assert spec.options({"width": 2, "select": "vote"}) == {"width": 2, "select": "vote"}
    for bad, key in (({"widht": 2}, "widht"), ({"width": 0}, "width"),
                     ({"width": 2.5}, "width"), ({"width": True}, "width"),
                     ({"select": "best"}, "select"), ({"aggregation": "max"}, "aggregation")):
        with pytest.raises(InvalidParameterError) as info:
            spec.options(bad)
        assert info.value.param == key
    keep = get("weighted_vote")
    assert keep.options({"keep_top": 1}) == {"keep_top": 1}
    for value in (0, 1.5, float("nan")):
        with pytest.raises(InvalidParameterError) as info:
            keep.options({"keep_top": value})
        assert info.value.param == "keep_top"
    with pytest.raises(InvalidParameterError) as info:
        get("no_such")
    assert info.value.param == "strategy"
    with pytest.raises(InvalidParameterError) as info:
        spec.kwargs(0, {})
    assert info.value.param == "n"


def test_a_missing_scorer_is_named():
    with pytest.raises(InvalidParameterError) as info:
        get("best_of_n").run(None, "x", n=2)  # type: ignore[arg-type]
    assert info.value.param == "reward"


def _reward(prompt, text):
    return float(len(text) % 7)


def _prm(prompt, steps):
    return [1.0 / (1 + len(s) % 5) for s in steps]


def _feedback(prompt, attempt):
    return Feedback(ok=len(attempt) < 10, message="make it shorter", score=-float(len(attempt)))


SCORERS = Scorers(reward=_reward, prm=_prm, feedback=_feedback, confidence=_reward)


@pytest.fixture(scope="module")
def gen(stories_path):
    from metagen.generators.local import LocalGenerator
    return LocalGenerator.from_pretrained(stories_path)


@pytest.mark.parametrize("name", list(specs()))
def test_run_equals_the_library_call(gen, name):
    """``spec.run`` at N = 4 is the library function called with the derived knobs, the
    scorers it reads and the same seeded params: the same text and candidates."""
    spec = specs()[name]
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=3, logprobs=0)
    prompt = "Once upon a time"
    got = spec.run(gen, prompt, n=4, params=params, scorers=SCORERS)
    kwargs = spec.kwargs(4, {})
    kwargs.update({arg: SCORERS.get(need) for need, arg in spec.scorer_args.items()})
    want = spec.function(gen, [prompt], params=params, **kwargs)[0]
    assert got.text == want.text
    assert [c.text for c in got.candidates] == [c.text for c in want.candidates]
    assert got.usage.generated_tokens == want.usage.generated_tokens > 0
