"""``Cancellation`` and ``CancellableGenerator`` on their own (the server-level behaviour, blocks
freed when a strategy's client leaves, is in test_strategy.py)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from metagen.errors import CallCancelled
from metagen.server.cancellation import CancellableGenerator, Cancellation
from metagen.types import Completion, SamplingParams


def test_setting_cancels_the_tracked_calls_and_any_tracked_later():
    cancellation = Cancellation()
    running, done = concurrent.futures.Future(), concurrent.futures.Future()
    cancellation.track(running)
    cancellation.track(done)
    cancellation.untrack(done)
    cancellation.set()
    assert running.cancelled() and not done.cancelled() and cancellation.is_set()
    late = concurrent.futures.Future()
    cancellation.track(late)
    assert late.cancelled()


class _ScriptedAsyncGenerator:
    """Scripted: ``agenerate`` waits until cancelled (and says so); ``generate`` is never used."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.aborted = threading.Event()
        self.calls = 0
        self.capabilities = None
        self.usage = None

    def generate(self, prompts, params):  # pragma: no cover - must not be called
        raise AssertionError("the wrapper must call agenerate")

    async def agenerate(self, prompts, params) -> list[list[Completion]]:
        self.calls += 1
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.aborted.set()
            raise
        return []


def test_scripted_a_call_in_flight_is_cancelled_and_later_calls_never_start():
    inner = _ScriptedAsyncGenerator()
    cancellation = Cancellation()

    async def main() -> None:
        gen = CancellableGenerator(inner, asyncio.get_running_loop(), cancellation)  # type: ignore[arg-type]
        worker = asyncio.ensure_future(asyncio.to_thread(gen.generate, ["p"], SamplingParams()))
        while not inner.started.is_set():
            await asyncio.sleep(0.01)
        cancellation.set()
        with pytest.raises(CallCancelled):
            await worker
        with pytest.raises(CallCancelled):
            await asyncio.to_thread(gen.generate, ["p"], SamplingParams())

    asyncio.run(main())
    assert inner.aborted.is_set() and inner.calls == 1
