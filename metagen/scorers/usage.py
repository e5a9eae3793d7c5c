"""A cumulative compute meter for scorers (``scorer_tokens``, ``scorer_calls``, ``scorer_flops``).

Scorers that run a model keep one :class:`UsageMeter` and expose ``usage`` from it; a strategy
measures what a scorer spent as ``scorer.usage`` after minus before (:func:`usage_of`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from metagen.types import Usage


class UsageMeter:
    """Mutable running totals; ``usage`` returns an immutable :class:`Usage` snapshot."""

    __slots__ = ("_tokens", "_calls", "_flops", "_seconds")

    def __init__(self) -> None:
        self._tokens = 0
        self._calls = 0
        self._flops = 0.0
        self._seconds = 0.0

    def add(self, tokens: int, flops: float, calls: int = 1) -> None:
        self._tokens += int(tokens)
        self._calls += int(calls)
        self._flops += float(flops)

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Add the wall time of the ``with`` block to the meter."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self._seconds += time.perf_counter() - start

    @property
    def usage(self) -> Usage:
        return Usage(scorer_tokens=self._tokens, scorer_calls=self._calls,
                     scorer_flops=self._flops, wall_time=self._seconds)


def usage_of(obj: object) -> Usage:
    """``obj.usage`` when it is a :class:`Usage`, else an empty Usage (plain callables)."""
    usage = getattr(obj, "usage", None)
    return usage if isinstance(usage, Usage) else Usage()
