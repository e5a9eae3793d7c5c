"""``EngineConfig(deterministic=True)``: seeded samples the same bits whatever the prefix cache
held, whatever was batched alongside and on any thread count, on every vector build this CPU
runs (metagen.engine.invariant)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from hypothesis import given, strategies as st

from metagen.engine.config import EngineConfig
from metagen.engine.invariant import split_steps
from metagen.engine.native import build as native_build
from metagen.engine.native.library import library
from metagen.errors import InvalidParameterError
from metagen.testbed.modeling import MODELS_DIR
from metagen.testbed.problems import format_prompt, make_problems
from metagen.types import SamplingParams

from tests.tolerances import FLOAT_LOGPROB_TOL

from ._native_variants import cpu_flags

ROOT = Path(__file__).resolve().parents[2]
# 8 problems x 8 samples = the 64 seeded samples at temperature 0.8 the guarantee is checked on
POLICY_DIR = MODELS_DIR / "policy"
PARAMS = SamplingParams(n=8, temperature=0.8, max_tokens=64, seed=1234)


def test_split_steps_golden():
    assert split_steps([40, 1, 3], 16) == [[(0, 0, 16)], [(0, 16, 16)],
                                           [(0, 32, 8), (1, 0, 1), (2, 0, 3)]]
    assert split_steps([1] * 5, 2) == [[(0, 0, 1), (1, 0, 1)], [(2, 0, 1), (3, 0, 1)],
                                       [(4, 0, 1)]]
    assert split_steps([], 16) == []
    with pytest.raises(ValueError, match="max_tokens"):
        split_steps([3], 0)


@given(st.lists(st.integers(0, 40), max_size=12), st.integers(1, 17))
def test_split_steps_runs_every_token_once_in_order(lengths, cap):
    pieces = split_steps(lengths, cap)
    seen: dict[int, int] = {}  # row -> tokens run so far
    for piece in pieces:
        assert 0 < sum(n for _, _, n in piece) <= cap
        for row, first, n in piece:
            assert n > 0 and first == seen.get(row, 0)  # a row's tokens in order, no gap
            seen[row] = first + n
    assert seen == {r: n for r, n in enumerate(lengths) if n}


def _prompts(seed: int) -> list[str]:
    return [format_prompt(p) for p in make_problems("test", 8, seed=seed)]


def _samples(gen, prompts: list[str], params: SamplingParams) -> list[list[object]]:
    return [[c.token_ids, c.logprobs] for per in gen.generate(prompts, params) for c in per]


def observe() -> dict[str, list[list[object]]]:
    """The 64 seeded samples (token ids and logprobs) of a deterministic engine on the testbed
    policy in every condition: cold then warm on 1, 2 and the default thread count, each prompt
    alone on a warm engine, and batched with another caller's greedy rows."""
    from metagen.generators.local import LocalGenerator

    prompts = _prompts(0)
    default = torch.get_num_threads()
    seen: dict[str, list[list[object]]] = {}
    for threads in (1, 2, default):
        torch.set_num_threads(threads)
        gen = LocalGenerator.from_pretrained(POLICY_DIR, deterministic=True)
        seen[f"cold@{threads}"] = _samples(gen, prompts, PARAMS)
        seen[f"warm@{threads}"] = _samples(gen, prompts, PARAMS)
        if threads == 1:
            seen["alone"] = [s for p in prompts for s in _samples(gen, [p], PARAMS)]
    torch.set_num_threads(default)
    gen = LocalGenerator.from_pretrained(POLICY_DIR, deterministic=True)
    others = threading.Thread(target=gen.generate, args=(
        _prompts(5), SamplingParams(temperature=0.0, max_tokens=48)))
    others.start()
    seen["batched"] = _samples(gen, prompts, PARAMS)
    others.join()
    return seen


def _check(seen: dict[str, list[list[object]]]) -> None:
    ref = seen["cold@1"]
    assert len(ref) == 64 and len({json.dumps(s[0]) for s in ref}) > 32  # real, varied samples
    for name, got in seen.items():
        assert [s[0] for s in got] == [s[0] for s in ref], name  # token ids
        assert [s[1] for s in got] == [s[1] for s in ref], name  # logprobs, bit for bit


@pytest.fixture(scope="module")
def native() -> None:
    if library() is None:
        pytest.skip("no native build here (no C compiler, or METAGEN_NATIVE=0)")


def test_seeded_samples_equal_cold_warm_alone_batched_on_any_thread_count(native):
    _check(observe())


@pytest.mark.skipif("avx512f" not in cpu_flags(), reason="the native build is the AVX2 one here")
def test_the_same_on_the_avx2_build(native, tmp_path):
    """On an AVX-512 CPU the AVX2 build is a different library: the same guarantee there, in a
    process of its own (the library is loaded once per process)."""
    if native_build.compiler() is None:
        pytest.skip("no C compiler")
    env = {**os.environ, "METAGEN_NATIVE_ISA": "avx2", "METAGEN_CACHE_DIR": str(tmp_path)}
    code = ("import json, sys; from tests.engine.test_deterministic import observe; "
            "json.dump(observe(), sys.stdout)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True, timeout=600).stdout
    _check(json.loads(out))


def test_deterministic_without_the_native_kernels_fails_naming_it(monkeypatch):
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.native import small_matmul

    monkeypatch.setattr("metagen.engine.model_runner.load_small_matmul", lambda: None)
    with pytest.raises(InvalidParameterError, match="deterministic"):
        LLMEngine.from_pretrained(POLICY_DIR, deterministic=True)
    assert small_matmul  # the real module stays untouched


@pytest.mark.parametrize("option", [{"quantization": "int8"}, {"kv_cache_dtype": "int8"},
                                    {"dtype": "bfloat16"}, {"prompt_lookup": 3}])
def test_deterministic_refuses_what_it_does_not_cover(option):
    with pytest.raises(InvalidParameterError, match="deterministic.*" + next(iter(option))):
        EngineConfig(deterministic=True, **option)
    with pytest.raises(InvalidParameterError, match="deterministic"):
        EngineConfig(deterministic=1)  # type: ignore[arg-type]


def test_deterministic_greedy_equals_transformers(native, stories_path, stories_engine_factory,
                                                  hf_greedy):
    """The batch-invariant path computes the same model: transformers' greedy tokens, and
    logprobs within float32 summation-order rounding (tests/tolerances.py)."""
    engine = stories_engine_factory(deterministic=True)
    prompt = engine.tokenizer("Once upon a time")["input_ids"]
    out = engine.generate([prompt], SamplingParams(temperature=0.0, max_tokens=120,
                                                   ignore_eos=True))[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(stories_path, prompt, 120, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < FLOAT_LOGPROB_TOL


def test_deterministic_scores_equal_alone_and_in_a_chunked_batch(native, stories_engine_factory):
    """Prompt scoring (every position's logits) and chunked prefill: the same bits whatever the
    step size and batch."""
    tok_engine = stories_engine_factory(deterministic=True)
    ids = [tok_engine.tokenizer(t)["input_ids"] for t in (
        "Once upon a time there was a dog named Max who liked to run in the park",
        "Lily and Tom went to the beach", "The sun was hot")]
    alone = [stories_engine_factory(deterministic=True).generate(
        [p], SamplingParams(temperature=0.0, max_tokens=8, logprobs=2))[0] for p in ids]
    chunked = stories_engine_factory(deterministic=True, max_num_batched_tokens=7).generate(
        ids, SamplingParams(temperature=0.0, max_tokens=8, logprobs=2))
    for a, b in zip(alone, chunked):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].logprobs == b.outputs[0].logprobs
        assert a.outputs[0].top_logprobs == b.outputs[0].top_logprobs
