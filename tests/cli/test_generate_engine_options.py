"""``metagen generate``'s engine options reach the engine: each run equals
``LocalGenerator.from_pretrained(MODEL, **the same EngineConfig fields)`` for the same prompt and
seed (stories260K), its ``--json`` reports the engine's values, and speculative decoding (the
model as its own draft, prompt lookup) equals plain greedy."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams

PROMPT = "Once upon a time"


def cli_json(capsys, model, *argv: str) -> dict:
    code = main(["generate", str(model), PROMPT, "--json", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def library(model, params: SamplingParams, **engine) -> list[dict]:
    gen = LocalGenerator.from_pretrained(model, **engine)
    try:
        return [c.to_dict() for c in gen.generate([PROMPT], params)[0]]
    finally:
        gen.close()


@pytest.mark.parametrize("flags, engine", [
    (["--kv-cache-dtype", "int8"], {"kv_cache_dtype": "int8"}),
    # prompt + 64 tokens outrun a 32-token window: blocks are released as it goes
    (["--kv-window-tokens", "32", "--kv-sink-tokens", "16"],
     {"kv_window_tokens": 32, "kv_sink_tokens": 16}),
    (["--kv-window-tokens", "16", "--num-blocks", "12"],
     {"kv_window_tokens": 16, "num_blocks": 12}),
])
def test_cli_equals_the_library_with_the_same_engine_options(capsys, stories_path, flags,
                                                             engine) -> None:
    doc = cli_json(capsys, stories_path, "--n", "2", "--seed", "7", "--max-tokens", "64",
                   "--logprobs", "1", *flags)
    want = library(stories_path, SamplingParams(n=2, seed=7, max_tokens=64, logprobs=1),
                   **engine)
    assert doc["completions"] == want
    assert doc["backend"] == "local"
    assert {k: doc["engine"][k] for k in engine} == engine


def test_int8_kv_cache_is_not_the_float32_run(capsys, stories_path) -> None:
    """The option changes what runs: the int8 cache's logprobs are not float32's."""
    int8 = cli_json(capsys, stories_path, "--temperature", "0", "--max-tokens", "24",
                    "--logprobs", "0", "--kv-cache-dtype", "int8")
    plain = cli_json(capsys, stories_path, "--temperature", "0", "--max-tokens", "24",
                     "--logprobs", "0")
    assert int8["completions"][0]["logprobs"] != plain["completions"][0]["logprobs"]
    assert "engine" not in plain and plain["completions"][0]["token_ids"]


@pytest.mark.parametrize("flags, engine", [
    (["--speculative-model", "SELF"], {"speculative_model": "SELF"}),
    (["--speculative-model", "SELF", "--num-speculative-tokens", "2", "--adaptive-speculation"],
     {"speculative_model": "SELF", "num_speculative_tokens": 2, "adaptive_speculation": True}),
    (["--prompt-lookup", "2", "--num-speculative-tokens", "3"],
     {"prompt_lookup": 2, "num_speculative_tokens": 3}),
])
def test_cli_speculative_equals_plain_greedy(capsys, stories_path, flags, engine) -> None:
    """The model as its own draft, or prompt lookup: greedy output is plain greedy's."""
    flags = [str(stories_path) if f == "SELF" else f for f in flags]
    engine = {k: str(stories_path) if v == "SELF" else v for k, v in engine.items()}
    spec = cli_json(capsys, stories_path, "--temperature", "0", "--max-tokens", "48", *flags)
    [plain] = library(stories_path, SamplingParams(temperature=0, max_tokens=48))
    assert spec["completions"][0]["token_ids"] == plain["token_ids"]
    assert spec["completions"][0]["text"] == plain["text"]
    assert {k: spec["engine"][k] for k in engine} == engine
