"""The peer interface of the engine benchmark.

A peer is a class with ``available()``, ``load(paths)`` and one method per workload it runs.
Every workload method returns the generated token ids (lists), so the harness can check that all
engines produced the same greedy tokens, and may add counters to ``self.last``. A peer lacking a
workload raises :class:`Unsupported` and the row is reported as skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Unsupported(Exception):
    """This peer does not run this workload."""


_WEIGHT_BITS = {None: 32, "int8": 8, "w8a8": 8, "q8_0": 8, "q4_0": 4, "int4": 4,
                "int4-all": 4}


def weight_bits(quantization: str | None) -> int:
    """Bits per weight of a peer's ``quantization`` (None: float32), before scales: the class a
    peer is compared within (int8 against int8 and Q8_0, float32 against float32)."""
    return _WEIGHT_BITS[quantization]


class Peer:
    name = "peer"
    quantization: str | None = None  # the weights' format when not float32: a weight_bits key

    def available(self) -> bool:
        return False

    def decode_read_bytes(self, model: str) -> int | None:
        """Bytes of weights one batch-1 decode step of ``model`` streams as this peer holds it
        (every stored tensor but the input embedding table, in the peer's own format), or None
        when the peer holds the float32 checkpoint as it is (the harness counts those bytes)."""
        return None

    def load(self, paths: dict[str, Path]) -> None:
        self.paths = paths
        self.last: dict[str, Any] = {}

    def greedy(self, model: str, prompt: list[int], max_new: int) -> list[int]:
        raise Unsupported

    def best_of_n(self, model: str, prompt: list[int], n: int, max_new: int,
                  seed: int) -> list[list[int]]:
        raise Unsupported

    def beam(self, model: str, prompt: list[int], width: int, max_new: int) -> list[int]:
        raise Unsupported

    def speculative(self, model: str, prompt: list[int], max_new: int, k: int,
                    mode: str) -> list[int]:
        raise Unsupported
