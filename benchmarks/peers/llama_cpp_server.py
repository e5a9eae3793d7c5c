"""llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) on loopback, from
the llama.cpp peer environment (``bash benchmarks/setup_peers.sh llama.cpp``), serving a Hugging
Face Llama folder converted to an fp32 GGUF with its own vocabulary
(``workers/_llama_cpp_convert.py --own-vocab``, cached in the environment's ``models``).

The server runs with an fp32 KV cache (``--type_k 0 --type_v 0``, as metagen's engine), the
model's own context, ``threads`` threads for decode and prefill, in a process group of its own,
verbose (its log says, per request, how much of the prompt it reused: :mod:`benchmarks.prefill_counters`);
it is ready when ``GET /v1/models`` answers 200 and is stopped by the pid it started, SIGTERM
then SIGKILL to its group (:func:`~benchmarks.peers.vllm_server.stop`). :func:`serve` is that as
a context manager (stopped also when the caller fails). It runs one request at a time (a new
request never interrupts a running one) and ignores ``n`` (OpenAIGenerator sends one request per
sample anyway).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from benchmarks.peers.remote import WORKERS, peers_dir
from benchmarks.peers.server_process import free_port, stop, wait_healthy

SETUP = "bash benchmarks/setup_peers.sh llama.cpp"
CONVERT = WORKERS / "_llama_cpp_convert.py"


def llama_cpp_python() -> Path | None:
    """The llama.cpp peer environment's interpreter, or None when it is not installed."""
    python = peers_dir() / "llama.cpp" / "bin" / "python"
    return python if python.is_file() else None


def own_vocab_gguf(python: Path, folder: Path) -> Path:
    """``folder`` as an fp32 GGUF with its own vocabulary (converted once, then cached)."""
    env = {**os.environ, "METAGEN_PEER_CACHE": str(python.parent.parent / "models")}
    out = subprocess.run([str(python), str(CONVERT), str(folder), "--own-vocab"], check=True,
                         capture_output=True, text=True, cwd=CONVERT.parent, env=env)
    return Path(out.stdout.strip().splitlines()[-1])


@dataclass(slots=True)
class LlamaCppServer:
    """A running server: ``url`` (OpenAI root), ``model`` (served name), ``log`` (its output),
    ``version`` (llama-cpp-python's), ``startup_s`` (conversion excluded)."""

    proc: subprocess.Popen[bytes]
    url: str
    model: str
    log: Path
    version: str
    startup_s: float


@contextmanager
def serve(folder: str | Path, name: str, log: Path, *, threads: int,
          ready_timeout: float = 180.0) -> Iterator[LlamaCppServer]:
    """A ready :class:`LlamaCppServer` on ``folder`` as ``name`` for the block, stopped after it
    (also when the block or the start fails). ``FileNotFoundError`` naming :data:`SETUP` when
    the environment is missing."""
    python = llama_cpp_python()
    if python is None:
        raise FileNotFoundError(f"the llama.cpp peer environment is not installed ({SETUP})")
    folder = Path(folder)
    gguf = own_vocab_gguf(python, folder)
    version = subprocess.run([str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    context = int(json.loads((folder / "config.json").read_text())["max_position_embeddings"])
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            [str(python), "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", name,
             "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(context),
             "--n_batch", str(context), "--n_threads", str(threads),
             "--n_threads_batch", str(threads), "--type_k", "0", "--type_v", "0",
             "--interrupt_requests", "false"],
            stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        root = f"http://127.0.0.1:{port}"
        wait_healthy(root, proc, log, ready_timeout, path="/v1/models",
                     who="llama_cpp.server")
        yield LlamaCppServer(proc, root + "/v1", name, log, version, time.monotonic() - started)
    finally:
        stop(proc)
