"""Stopping a strategy run whose client left, the generate call it waits on included.

A strategy runs synchronously in a worker thread. Its generator is wrapped in
:class:`CancellableGenerator`: each ``generate`` call runs as the wrapped generator's
``agenerate`` on the server's event loop while the worker waits for it. :class:`Cancellation` is
the run's flag (a ``threading.Event``, so a budget can poll it): setting it cancels every call
in flight, and cancelling ``agenerate`` aborts that call's own requests, so their KV blocks are
freed at once instead of when the call would have finished; the waiting ``generate`` raises
:class:`~metagen.errors.CallCancelled`, and any later call raises it before submitting anything.
Other callers' requests are not touched. A generator without ``agenerate`` is called directly
(its call in flight then runs to its end). The run's scorer calls are stopped by the same flag
between their batches (:mod:`metagen.scorers.interrupt`, armed by the strategy runner).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Sequence
from typing import Any

from metagen.errors import CallCancelled
from metagen.generators.base import Generator, Prompt
from metagen.server.wrapped import Wrapped
from metagen.types import Completion, SamplingParams


class Cancellation(threading.Event):
    """A strategy run's cancellation flag; :meth:`set` also cancels the calls it tracks."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._calls: set[concurrent.futures.Future[Any]] = set()

    def set(self) -> None:
        with self._lock:
            super().set()
            calls = list(self._calls)
        for call in calls:
            call.cancel()

    def track(self, call: concurrent.futures.Future[Any]) -> None:
        """Cancel ``call`` when this is set (at once if it already is)."""
        with self._lock:
            if not self.is_set():
                self._calls.add(call)
                return
        call.cancel()

    def untrack(self, call: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            self._calls.discard(call)


class CancellableGenerator(Wrapped):
    """``inner`` (a Generator) whose ``generate`` calls are cancelled with ``cancellation``;
    ``loop`` is the running event loop its ``agenerate`` runs on (not the calling thread's:
    ``generate`` must be called from another thread). Every other attribute is ``inner``'s."""

    def __init__(self, inner: Generator, loop: asyncio.AbstractEventLoop,
                 cancellation: Cancellation) -> None:
        super().__init__(inner)
        self._loop, self._cancellation = loop, cancellation

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``inner.generate(prompts, params)``, aborted when the run is cancelled (raises
        :class:`~metagen.errors.CallCancelled` then)."""
        if self._cancellation.is_set():
            raise CallCancelled("the strategy was cancelled before this generate call")
        agenerate = getattr(self._inner, "agenerate", None)
        if agenerate is None:
            return self._inner.generate(prompts, params)
        call = asyncio.run_coroutine_threadsafe(agenerate(prompts, params), self._loop)
        self._cancellation.track(call)
        try:
            result: list[list[Completion]] = call.result()
            return result
        except concurrent.futures.CancelledError:
            raise CallCancelled("the strategy was cancelled during a generate call; its "
                                "requests were aborted") from None
        finally:
            self._cancellation.untrack(call)
