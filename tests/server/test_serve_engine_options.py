"""``metagen serve``'s engine options (the table of :mod:`metagen.cli.engine_options`) reach the
served engine, and the per-request options (vLLM's ``guided_regex``, ``token_healing``) reach it
through the body: a served request equals the library call on an engine with the same options
(stories260K, same seed).

In-process: ``serve``'s own flag parsing (click) and :func:`metagen.cli.serve.engine_options`
build the engine options, and a server runs over a ``LocalGenerator`` with them (the fixture
starts and stops it). In a process of its own: ``metagen serve MODEL --prompt-lookup ...
--kv-cache-dtype int8`` (the whole command), stopped by the fixture."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from metagen.cli.engine_options import ENGINE_OPTION_NAMES
from metagen.cli.serve import engine_options, serve
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams
from tests.server.conftest import MODEL, spawned_server, start_server, stop_server

PROMPT = "Once upon a time"
WINDOW_FLAGS = ["--kv-cache-dtype", "int8", "--kv-window-tokens", "32", "--kv-sink-tokens", "16"]
WINDOW = {"kv_cache_dtype": "int8", "kv_window_tokens": 32, "kv_sink_tokens": 16}
SPEC_FLAGS = ["--prompt-lookup", "2", "--num-speculative-tokens", "3", "--kv-cache-dtype", "int8"]
SPEC = {"prompt_lookup": 2, "num_speculative_tokens": 3, "kv_cache_dtype": "int8"}


def served_options(model: Any, *argv: str) -> dict[str, Any]:
    """The engine options ``metagen serve MODEL ARGV...`` loads its model with."""
    params = dict(serve.make_context("serve", [str(model), *argv]).params)
    flags = {name: params.pop(name) for name in ENGINE_OPTION_NAMES}
    return engine_options(params["dtype"], params["device"], flags)


@pytest.fixture(scope="module")
def reference(stories_path):
    """The library on an engine with the options the server is started with."""
    gen = LocalGenerator.from_pretrained(stories_path, **WINDOW)
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def windowed(stories_path):
    options = served_options(stories_path, *WINDOW_FLAGS)
    assert options == WINDOW
    gen = LocalGenerator.from_pretrained(stories_path, **options)
    running = start_server(gen)
    with httpx.Client(base_url=running.url, timeout=60) as client:
        yield gen, client
    stop_server(running)
    gen.close()


def complete(client: httpx.Client, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, **body})
    assert response.status_code == 200, response.text
    return response.json()


def _gauge(text: str, name: str) -> int:
    return int(float(re.search(rf"^metagen_{name} (\S+)$", text, re.M).group(1)))  # type: ignore[union-attr]


def test_the_served_engine_has_the_flags_options(windowed, reference, served_gen) -> None:
    """/metrics counts the int8 cache's blocks: the library's with the same options, more than
    the default 64 MiB budget holds in float32 (``served_gen``: the model on a default
    engine)."""
    gen, client = windowed
    config = gen.engine.config
    assert (config.kv_cache_dtype, config.kv_window_tokens, config.kv_sink_tokens) == \
        ("int8", 32, 16)
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    blocks = _gauge(metrics.text, "kv_blocks_used") + _gauge(metrics.text, "kv_blocks_free")
    assert blocks == gen.engine.blocks.num_blocks == reference.engine.blocks.num_blocks
    assert blocks > 2 * served_gen.engine.blocks.num_blocks


def test_a_request_equals_the_library_on_the_same_engine(windowed, reference) -> None:
    _, client = windowed
    got = complete(client, n=2, seed=5, max_tokens=64, temperature=1.0, logprobs=0)
    [want] = reference.generate([PROMPT], SamplingParams(n=2, seed=5, max_tokens=64,
                                                         logprobs=0))
    assert [c["text"] for c in got["choices"]] == [w.text for w in want]
    assert [c["logprobs"]["token_logprobs"] for c in got["choices"]] == \
        [list(w.logprobs or ()) for w in want]


def test_guided_regex_is_honoured_as_the_library_constraint(windowed, reference) -> None:
    _, client = windowed
    got = complete(client, n=3, seed=8, max_tokens=16, guided_regex="[a-z]+ [a-z]+\\.")
    [want] = reference.generate([PROMPT], SamplingParams(n=3, seed=8, max_tokens=16,
                                                         regex="[a-z]+ [a-z]+\\."))
    assert [c["text"] for c in got["choices"]] == [w.text for w in want]
    assert all(re.fullmatch(r"[a-z]+ [a-z]+\.", c["text"]) for c in got["choices"]
               if c["finish_reason"] == "stop")


def test_token_healing_reaches_the_engine(windowed, reference) -> None:
    _, client = windowed
    got = complete(client, prompt="Once upon a ti", seed=2, max_tokens=10, token_healing=2)
    [[want]] = reference.generate(["Once upon a ti"], SamplingParams(seed=2, max_tokens=10,
                                                                     token_healing=2))
    assert got["choices"][0]["text"] == want.text


def test_serve_with_speculation_in_its_own_process_equals_the_library(stories_path) -> None:
    assert served_options(stories_path, *SPEC_FLAGS) == SPEC
    gen = LocalGenerator.from_pretrained(stories_path, **SPEC)
    try:
        [[want]] = gen.generate([PROMPT], SamplingParams(temperature=0, max_tokens=48,
                                                         logprobs=0))
    finally:
        gen.close()
    with spawned_server(stories_path, *SPEC_FLAGS, "--served-model-name", MODEL) as (_, url):
        response = httpx.post(f"{url}/v1/completions", timeout=60, json={
            "model": MODEL, "prompt": PROMPT, "temperature": 0, "max_tokens": 48,
            "logprobs": 0})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["text"] == want.text
    assert choice["logprobs"]["token_logprobs"] == list(want.logprobs or ())
