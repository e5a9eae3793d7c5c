"""A strategy run's generate calls as the server sees them, whatever the strategy.

:class:`BoundedGenerator` wraps the generator a strategy runs on: before each generate call (each
stage of the strategy) it checks the call against the server's per-call bound
(:func:`~metagen.server.strategy_policy.check_call`) and announces the run's usage so far to
``on_stage`` (the streamed progress chunks: :mod:`metagen.server.strategy_stream`); it counts
the tokens each call generates. The scorer usage so far is what the run's budget last saw
(:meth:`RunMeter.seen`, the budget's check before a stage).

:func:`first_call` runs a strategy up to its first generate call and stops it there, so what
the library refuses in that call's parameters (several greedy samples) and a first call over
the server's bound are 400s before any model call, streamed or not.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

from metagen.generators.base import Generator, Prompt
from metagen.server.strategy_policy import check_call
from metagen.server.wrapped import Wrapped
from metagen.types import Completion, SamplingParams, Usage


class RunMeter:
    """The usage of one strategy run so far: its generate calls and generated tokens (counted
    by :class:`BoundedGenerator`), its scorer usage as its budget last saw it."""

    def __init__(self, on_stage: Callable[[Usage], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._calls = self._tokens = 0
        self._seen = Usage()
        self._on_stage = on_stage

    def seen(self, usage: Usage) -> None:
        """The run's usage as its budget checks it (before a stage)."""
        with self._lock:
            self._seen = usage

    def usage(self) -> Usage:
        with self._lock:
            return dataclasses.replace(self._seen, calls=self._calls,
                                       generated_tokens=self._tokens)

    def stage(self) -> None:
        """A generate call is about to run: announce the usage so far."""
        if self._on_stage is not None:
            self._on_stage(self.usage())

    def add(self, outs: Sequence[Sequence[Completion]]) -> None:
        with self._lock:
            self._calls += 1
            self._tokens += sum(c.num_tokens for row in outs for c in row)


class BoundedGenerator(Wrapped):
    """``inner`` (a Generator) whose generate calls are bounded, counted and announced on
    ``meter`` (see the module docstring). Every other attribute is ``inner``'s."""

    def __init__(self, inner: Generator, meter: RunMeter) -> None:
        super().__init__(inner)
        self._meter = meter

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``inner.generate(prompts, params)`` after the per-call bound and the stage's
        announcement; raises :class:`~metagen.server.strategy_policy.TooManySamples`."""
        check_call(len(prompts) * params.n)
        self._meter.stage()
        outs = self._inner.generate(prompts, params)
        self._meter.add(outs)
        return outs


class _FirstCall(BaseException):
    """Stops a dry run at its first generate call (a BaseException: no strategy's
    ``except Exception`` takes it for a failed sample)."""


class _Stop(Wrapped):
    """``inner`` whose first generate call stops the run (see :func:`first_call`)."""

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        raise _FirstCall


def first_call(run: Callable[[Generator], object], generator: Generator) -> bool:
    """Run ``run`` on ``generator`` up to its first generate call, which is not made; True when
    it got there (False: it returned without one). What ``run`` raises before that call
    propagates (an ``InvalidParameterError`` for a parameter it refuses)."""
    try:
        run(_Stop(generator))
    except _FirstCall:
        return True
    return False
