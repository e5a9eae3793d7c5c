"""The backends of workload F (:mod:`benchmarks.strategy_e2e`): the testbed policy

- ``metagen``: in metagen's engine, in-process (:func:`~metagen.eval.demo.load_testbed_policy`,
  as ``metagen demo`` loads it: LocalGenerator with the demo's KV cache);
- ``vllm``: behind vLLM's CPU OpenAI-compatible server (:mod:`benchmarks.peers.vllm_server`, its
  statistics on, at most ``n`` sequences at once);
- ``llama.cpp``: behind llama-cpp-python's server (:mod:`benchmarks.peers.llama_cpp_server`);

the servers driven by :class:`~metagen.generators.openai.OpenAIGenerator`. Each is opened as a
:class:`Backend`: the generator, and a reading of the backend's own cumulative prefill counters
with the rule turning two readings into a :class:`~benchmarks.prefill_counters.Prefill`.
A server is started in a process group of its own and stopped by its pid when the block ends,
also on failure.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.prefill_counters import (VLLM_COUNTERS, Prefill, engine_prefill,
                                         llama_cpp_prefill, parse_prometheus, vllm_prefill)

BACKENDS = ("metagen", "vllm", "llama.cpp")
SERVED_NAME = "policy"
CALL_TIMEOUT_S = 900.0  # one generate call of up to 16 samples of 160 tokens on two shared cores
SETTLE_S, SETTLE_READS = 0.2, 25  # /metrics read again until two readings agree (5 s at most)


@dataclass(slots=True)
class Backend:
    """An open backend: ``read()`` its cumulative counters now, ``prefill(before, after)``
    what it prefilled between two readings; ``meta`` its version, threads, startup seconds."""

    name: str
    generator: Any
    read: Callable[[], Any]
    prefill: Callable[[Any, Any], Prefill]
    meta: dict[str, Any] = field(default_factory=dict)


def missing(name: str) -> str | None:
    """Why backend ``name`` cannot run here (its environment is not installed: the command that
    installs it), or None."""
    if name == "vllm":
        from benchmarks.peers.vllm_server import SETUP, vllm_python
        return None if vllm_python() is not None else f"not installed ({SETUP})"
    if name == "llama.cpp":
        from benchmarks.peers.llama_cpp_server import SETUP, llama_cpp_python
        return None if llama_cpp_python() is not None else f"not installed ({SETUP})"
    return None


@contextmanager
def open_backend(name: str, *, n: int, threads: int, logs: Path,
                 vllm_block_size: int | None = None) -> Iterator[Backend]:
    """Backend ``name`` (one of :data:`BACKENDS`) serving the testbed policy for the block;
    servers log into ``logs``. ``n``: the samples a call asks for (vLLM's sequence cap);
    ``vllm_block_size``: vLLM's KV block (None: its default, 128 tokens on CPU; its prefix
    cache reuses whole blocks only)."""
    from metagen.eval.demo import testbed_model

    policy = testbed_model("policy")
    if name == "metagen":
        with _metagen(threads) as backend:
            yield backend
    elif name == "vllm":
        with _vllm(policy, n, logs, vllm_block_size) as backend:
            yield backend
    elif name == "llama.cpp":
        with _llama_cpp(policy, n, threads, logs) as backend:
            yield backend
    else:
        from metagen.errors import InvalidParameterError
        raise InvalidParameterError("backend", name, f"must be one of {', '.join(BACKENDS)}")


@contextmanager
def _metagen(threads: int) -> Iterator[Backend]:
    from metagen.eval.demo import load_testbed_policy
    from metagen.generators.local import LocalGenerator

    gen = load_testbed_policy("local")
    if not isinstance(gen, LocalGenerator):
        raise RuntimeError(f"metagen's engine is not available here (got {type(gen).__name__})")
    with gen:
        yield Backend("metagen", gen, lambda: gen.engine.counters.snapshot(), engine_prefill,
                      {"threads": threads, "source": "LLMEngine.counters"})


@contextmanager
def _vllm(policy: Path, n: int, logs: Path, block_size: int | None) -> Iterator[Backend]:
    import httpx

    from benchmarks.peers.vllm_server import serve
    from metagen.generators.openai import OpenAIGenerator

    names = {name for name, _ in VLLM_COUNTERS.values()}
    extra = ("--block-size", str(block_size)) if block_size is not None else ()
    with serve(policy, SERVED_NAME, logs / "vllm.log", max_num_seqs=n, log_stats=True,
               extra=extra) as server, \
            OpenAIGenerator(server.url, SERVED_NAME, timeout=CALL_TIMEOUT_S,
                            max_concurrency=n) as gen:
        def fetch() -> Any:
            resp = httpx.get(server.root + "/metrics", timeout=30.0)
            resp.raise_for_status()
            return parse_prometheus(resp.text)

        def counted(samples: Any) -> Any:
            return {k: v for k, v in samples.items() if k[0] in names}

        def read() -> Any:  # settled: vLLM may record a step's stats after its response
            last = fetch()
            for _ in range(SETTLE_READS):
                time.sleep(SETTLE_S)
                now = fetch()
                if counted(now) == counted(last):
                    break
                last = now
            return last
        yield Backend("vllm", gen, read, vllm_prefill,
                      {"startup_s": server.startup_s, "log": str(server.log),
                       "source": "/metrics", "threads": "vLLM's own (all cores)",
                       "block_size": block_size or "vLLM's default"})


@contextmanager
def _llama_cpp(policy: Path, n: int, threads: int, logs: Path) -> Iterator[Backend]:
    from benchmarks.peers.llama_cpp_server import serve
    from metagen.generators.openai import OpenAIGenerator

    with serve(policy, SERVED_NAME, logs / "llama.cpp.log", threads=threads) as server, \
            OpenAIGenerator(server.url, SERVED_NAME, timeout=CALL_TIMEOUT_S,
                            max_concurrency=n) as gen:
        def read() -> int:
            return server.log.stat().st_size

        def prefill(before: int, after: int) -> Prefill:
            with server.log.open("rb") as f:
                f.seek(before)
                return llama_cpp_prefill(f.read(after - before).decode("utf-8", "replace"))
        yield Backend("llama.cpp", gen, read, prefill,
                      {"startup_s": server.startup_s, "log": str(server.log),
                       "version": server.version, "threads": threads,
                       "source": "server log (prefix-match hits, prompt eval counts)"})
