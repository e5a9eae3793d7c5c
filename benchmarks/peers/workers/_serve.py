"""The worker side of the peer protocol; standard library only (it runs in a peer's own
environment, which has neither metagen nor, perhaps, torch).

One JSON request per line on stdin, ``{"method": str, "args": {...}}``; one JSON reply per line,
``{"ok": true, "result": ..., "last": {...}}``, ``{"ok": false, "unsupported": true}`` or
``{"ok": false, "error": str}``. The protocol owns the real stdout: file descriptor 1 is pointed
at stderr before any peer library loads, so a library that prints cannot corrupt a reply.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any


class Unsupported(Exception):
    """This peer does not run this workload."""


class Worker:
    """Base of a peer worker: ``load`` gets the models' Hugging Face folders; workload methods
    return token ids and may set ``self.last`` (counters reported with the row)."""

    last: dict[str, Any]  # reset to {} by serve before each request

    def load(self, paths: dict[str, str], threads: int, quantization: str | None = None) -> None:
        """Load (converting on first use) every model of ``paths`` in the weight format
        ``quantization`` (None: float32, as the checkpoint; a quantized peer names its own)."""
        self.paths = paths
        self.threads = threads
        self.quantization = quantization

    def decode_read_bytes(self, model: str) -> int:
        """Bytes of weights a batch-1 decode step of ``model`` streams in this worker's format:
        every stored weight tensor but the input embedding table. Quantized formats only."""
        raise Unsupported("decode_read_bytes")

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        raise Unsupported("greedy")

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        raise Unsupported("best_of_n")

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        raise Unsupported("beam")

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        raise Unsupported("speculative")


def converted_dir(hf_folder: str, fmt: str) -> Path:
    """Where a conversion of ``hf_folder`` into ``fmt`` is cached: keyed by the folder's config
    and weight files' sizes and modification times, under ``$METAGEN_PEER_CACHE``."""
    src = Path(hf_folder)
    key = hashlib.sha256()
    for f in sorted(src.iterdir()):
        if f.is_file():
            st = f.stat()
            key.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    cache = Path(os.environ.get("METAGEN_PEER_CACHE", Path.home() / ".cache/metagen-peers"))
    return cache / f"{src.name}-{fmt}-{key.hexdigest()[:12]}"


def mirror_without_tokenizer(src: str | Path, dst: Path) -> None:
    """Symlink every file of the model folder ``src`` into the existing folder ``dst`` except
    its tokenizer files: the converters stage the benchmark's models this way, next to the
    synthetic tokenizer their peer needs, without ever writing into ``src``."""
    for f in Path(src).resolve().iterdir():
        if f.is_file() and not f.name.startswith("tokenizer"):
            (dst / f.name).symlink_to(f)


def serve(worker: Worker) -> None:
    """Answer requests until stdin closes."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        reply: dict[str, Any]
        try:
            req = json.loads(line)
            worker.last = {}
            result = getattr(worker, req["method"])(**req.get("args", {}))
            reply = {"ok": True, "result": result, "last": getattr(worker, "last", {})}
        except Unsupported as e:
            reply = {"ok": False, "unsupported": True, "error": str(e)}
        except Exception as e:  # reported to the harness, which raises PeerError
            traceback.print_exc()
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        out.write(json.dumps(reply) + "\n")
