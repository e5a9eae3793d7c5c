"""Peers that live in their own environments, driven over a pipe.

A setup script (``benchmarks/setup_peers.sh``) installs each peer into ``.peers/<name>/``, a
virtual environment of its own: their packages pin versions of transformers, torch or numpy that
would break metagen's. The benchmark starts ``.peers/<name>/bin/python
benchmarks/peers/workers/<module>.py`` once and sends it one JSON line per call; the worker
answers with one JSON line (see :mod:`benchmarks.peers.workers._serve`). The harness times the
call around the pipe: a round trip costs well under a millisecond against runs of seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.peers.base import Peer, Unsupported

ROOT = Path(__file__).resolve().parents[2]
WORKERS = Path(__file__).resolve().parent / "workers"


class PeerError(RuntimeError):
    """A peer's worker failed or died; the message carries its error."""


def peers_dir() -> Path:
    """Where the setup script put the peers' environments (``METAGEN_PEERS_DIR``, else
    ``<repo>/.peers``)."""
    return Path(os.environ.get("METAGEN_PEERS_DIR") or ROOT / ".peers")


class RemotePeer(Peer):
    """A peer run by ``workers/<worker>.py`` in the environment ``<peers_dir>/<env>``.

    ``available()``: the environment exists and ``METAGEN_BENCH_PEERS`` (comma-separated names),
    when set, names this peer."""

    name = "remote"
    env = ""
    worker = ""

    def python(self) -> Path:
        return peers_dir() / self.env / "bin" / "python"

    def worker_file(self) -> Path:
        return WORKERS / f"{self.worker}.py"

    def available(self) -> bool:
        wanted = os.environ.get("METAGEN_BENCH_PEERS")
        if wanted is not None and self.name not in wanted.split(","):
            return False
        return self.python().is_file()

    def load(self, paths: dict[str, Path]) -> None:
        super().load(paths)
        import torch

        self.proc = subprocess.Popen(
            [str(self.python()), str(self.worker_file())], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "METAGEN_PEER_CACHE": str(peers_dir() / self.env / "models")})
        self._call("load", paths={k: str(p) for k, p in paths.items()},
                   threads=torch.get_num_threads(), quantization=self.quantization)

    def decode_read_bytes(self, model: str) -> int | None:
        """A quantized peer's worker counts the bytes of its converted model."""
        return self._call("decode_read_bytes", model=model) if self.quantization else None

    def close(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def _call(self, method: str, **args: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps({"method": method, "args": args}) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise PeerError(f"{self.name}: worker exited (code {self.proc.poll()}) during "
                            f"{method}; see its stderr above")
        reply = json.loads(line)
        if reply.get("unsupported"):
            raise Unsupported(reply.get("error", ""))
        if not reply.get("ok"):
            raise PeerError(f"{self.name}: {method} failed: {reply.get('error')}")
        self.last = reply.get("last") or {}
        return reply["result"]

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        return self._call("greedy", model=model, prompt=prompt, max_new=max_new)

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        return self._call("best_of_n", model=model, prompt=prompt, n=n, max_new=max_new,
                          seed=seed)

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        return self._call("beam", model=model, prompt=prompt, width=width, max_new=max_new)

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        return self._call("speculative", model=model, prompt=prompt, max_new=max_new, k=k,
                          mode=mode)


class OpenVINOGenAIPeer(RemotePeer):
    name, env, worker = "openvino-genai", "openvino-genai", "openvino_genai_worker"


class OpenVINOGenAIInt8Peer(OpenVINOGenAIPeer):
    """OpenVINO GenAI on ``--weight-format int8`` weights (NNCF: per-channel asymmetric int8)."""

    name, quantization = "openvino-genai-int8", "int8"


class OnnxRuntimeGenAIPeer(RemotePeer):
    name, env, worker = "onnxruntime-genai", "onnxruntime-genai", "onnxruntime_genai_worker"


class OnnxRuntimeGenAIInt8Peer(OnnxRuntimeGenAIPeer):
    """onnxruntime-genai on its builder's ``-p int8`` weights (MatMulNBits, 8 bits)."""

    name, quantization = "onnxruntime-genai-int8", "int8"


class OnnxRuntimeGenAIInt4Peer(OnnxRuntimeGenAIPeer):
    """onnxruntime-genai on its builder's ``-p int4`` weights (MatMulNBits, 4 bits, blocks of
    32, its CPU default of int8 activations: accuracy level 4)."""

    name, quantization = "onnxruntime-genai-int4", "int4"


class LlamaCppPeer(RemotePeer):
    name, env, worker = "llama.cpp", "llama.cpp", "llama_cpp_worker"


class LlamaCppQ8Peer(LlamaCppPeer):
    """llama.cpp on a Q8_0 GGUF (blocks of 32 int8 weights and one fp16 scale: 34 bytes)."""

    name, quantization = "llama.cpp-q8_0", "q8_0"


class LlamaCppQ4Peer(LlamaCppPeer):
    """llama.cpp on a Q4_0 GGUF, quantized by llama.cpp's own quantizer (its default mix)."""

    name, quantization = "llama.cpp-q4_0", "q4_0"


class CTranslate2Peer(RemotePeer):
    name, env, worker = "ctranslate2", "ctranslate2", "ctranslate2_worker"
