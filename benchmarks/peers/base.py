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


class Peer:
    name = "peer"
    quantization: str | None = None  # the weights' format when not float32 (e.g. "int8")

    def available(self) -> bool:
        return False

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
