"""``metagen serve`` reads the strategy registry: every strategy available on serve is accepted
with its defaults, runs from the openai SDK (streamed too, with progress chunks) with the same
answer as the library's ``spec.run`` for the same seed, and a strategy module the server has
never heard of (a throwaway spec added to the registry here) is served as it is.

A real server on loopback over the testbed policy; the reward model and PRM are scripted
(plain functions), so the test covers the server's dispatch, not the scorers."""

from __future__ import annotations

import json
from dataclasses import dataclass

import openai
import pytest

from metagen.server.strategy_params import parse_strategy
from metagen.strategies import registry
from metagen.strategies.spec import Scorers, StrategySpec, param
from metagen.testbed import format_prompt, make_problems
from metagen.types import Result, SamplingParams
from tests.server.conftest import MODEL, local_policy, serving_testbed_policy

PROBLEM = format_prompt(make_problems("test", 1, seed=3, difficulties=[3])[0])
SEED, MAX_TOKENS = 5, 32
PARAMS = SamplingParams(temperature=0.8, seed=SEED, max_tokens=MAX_TOKENS)
N = 4
SERVED = sorted(registry.names("serve"))


def scripted_orm(prompt, text):
    """Scripted reward: a deterministic function of the text."""
    return float(len(text) % 7) / 7


def scripted_prm(prompt, steps):
    """Scripted PRM: a deterministic score per step."""
    return [1.0 / (1 + len(s) % 5) for s in steps]


SCORERS = Scorers(reward=scripted_orm, prm=scripted_prm)


@pytest.fixture(scope="module")
def scripted_server():
    with serving_testbed_policy(rewards={"orm": scripted_orm},
                                prms={"prm": scripted_prm}) as running:
        yield running


@pytest.fixture(scope="module")
def ref():
    with local_policy() as gen:
        yield gen


@pytest.fixture(scope="module")
def sdk(scripted_server):
    with openai.OpenAI(base_url=scripted_server.base_url, api_key="unused",
                       max_retries=0) as client:
        yield client


def test_serve_runs_every_family_and_the_step_searches():
    served = set(registry.names("serve"))
    assert {"best_of_n", "self_consistency", "weighted_vote", "mbr", "rejection_sampling",
            "adaptive_self_consistency", "deepconf", "step_beam_search", "lookahead_search",
            "dvts", "best_first", "tree_of_thoughts", "mcts", "rebase", "particle_filtering",
            "self_refine"} <= served
    assert not {"refine_with_feedback", "treefinement"} & served
    assert {registry.get(name).family for name in served} == {"subsampled", "each_n",
                                                               "adaptive", "refinement"}


@pytest.mark.parametrize("name", SERVED)
def test_every_strategy_on_serve_is_accepted_with_its_defaults(name):
    sreq = parse_strategy({"strategy": name}, {"orm": scripted_orm}, {"prm": scripted_prm})
    spec = registry.get(name)
    assert (sreq.strategy, sreq.n, sreq.options) == (name, 16, {})
    assert sreq.prm == ("prm" if "prm" in spec.needs | spec.optional else None)
    assert sreq.reward == ("orm" if "reward" in spec.needs | spec.optional else None)


def _untimed(trace):
    """``trace`` without its timings (wall time differs between two runs)."""
    if isinstance(trace, dict):
        return {k: _untimed(v) for k, v in trace.items()
                if k not in ("wall_time", "seconds") and not k.endswith("_seconds")}
    if isinstance(trace, list):
        return [_untimed(v) for v in trace]
    return trace


def _ask(sdk, metagen, stream=False):
    return sdk.completions.create(model=MODEL, prompt=PROBLEM, max_tokens=MAX_TOKENS,
                                  temperature=0.8, seed=SEED, stream=stream,
                                  extra_body={"metagen": metagen})


@pytest.mark.parametrize("name", SERVED)
def test_scripted_every_strategy_on_serve_answers_as_the_library_streamed_and_not(
        sdk, ref, name):
    """Each strategy at N = 4 from the SDK: the library's ``spec.run`` answer (same seed, same
    scripted scorers), its trace as ``return: "tree"``; streamed, one progress chunk per
    generate call before the same answer."""
    want = registry.get(name).run(ref, PROBLEM, n=N, params=PARAMS, scorers=SCORERS)
    got = _ask(sdk, {"strategy": name, "n": N, "return": "tree"})
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.text
    assert info["strategy"] == name and info["n"] == N
    assert got.usage.completion_tokens == want.usage.generated_tokens > 0
    assert _untimed(info["tree"]) == _untimed(json.loads(json.dumps(want.trace)))
    chunks = list(_ask(sdk, {"strategy": name, "n": N}, stream=True))
    progress = [c.model_extra["metagen"]["progress"] for c in chunks
                if not c.choices and "metagen" in (c.model_extra or {})]
    assert [p["stage"] for p in progress] == list(range(len(progress))) and progress
    assert len(progress) == want.usage.calls
    tokens = [p["generated_tokens"] for p in progress]
    assert tokens == sorted(tokens) and tokens[-1] < want.usage.generated_tokens
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.text


def shortest_of_n(generator, prompts, *, n=4, longest=False, params=None, budget=None):
    """Throwaway strategy (this test only): the shortest (or longest) of ``n`` samples."""
    before = generator.usage
    rows = generator.generate(list(prompts), (params or SamplingParams()).with_(n=n))
    usage = generator.usage - before
    pick = max if longest else min
    return [Result(best=pick(row, key=lambda c: c.num_tokens), candidates=list(row),
                   scores=[float(c.num_tokens) for c in row], usage=usage,
                   trace={"longest": longest}) for row in rows]


@dataclass(frozen=True, slots=True)
class ShortestConfig:
    """shortest_of_n's parameters besides N."""

    longest: bool = param(False, "pick the longest sample instead")


THROWAWAY = StrategySpec("shortest_of_n", shortest_of_n, "each_n", "shortest of N",
                         ShortestConfig)


def test_a_strategy_module_the_server_never_heard_of_is_served(sdk, ref, monkeypatch):
    """One module is one strategy on serve too: a spec added to the registry (here, by the
    test) is accepted, validated from its config and run, with no server file knowing it."""
    monkeypatch.setattr(registry, "_SPECS", {**registry.specs(), THROWAWAY.name: THROWAWAY})
    for longest in (False, True):
        [want] = shortest_of_n(ref, [PROBLEM], n=6, longest=longest, params=PARAMS)
        got = _ask(sdk, {"strategy": "shortest_of_n", "n": 6, "longest": longest,
                         "return": "candidates"})
        info = got.model_extra["metagen"]
        assert got.choices[0].text == want.best.text
        assert info["candidates"] == [c.text for c in want.candidates]
        assert info["scores"] == want.scores
    for bad, field, said in (({"longest": "yes"}, "metagen.longest", "must be bool"),
                             ({"width": 2}, "metagen.width", "'longest'"),
                             ({"n": 0}, "metagen.n", "[1, 256]")):
        with pytest.raises(openai.BadRequestError) as err:
            _ask(sdk, {"strategy": "shortest_of_n"} | bad)
        assert err.value.param == field and said in err.value.body["message"]
