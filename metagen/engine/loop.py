"""EngineLoop: one thread owns an :class:`~metagen.engine.llm_engine.LLMEngine`; any number of
callers -- threads and asyncio tasks -- submit work to it and wait on their own handles.

Requests of concurrent callers join the same engine steps (continuous batching across callers,
as vLLM's async engine does). Only the loop's thread touches the engine: a caller hands it a
*submission*, a function ``(engine) -> request ids`` that the loop runs between two steps, and
gets a :class:`RequestHandle` that completes with those requests' outputs (and, for a streaming
handle, yields their :class:`~metagen.engine.outputs.StreamDelta` s after every step).

Failure is per caller. A caller that stops waiting -- interrupted (``KeyboardInterrupt``), timed
out, cancelled, or raising in its own code -- aborts only its own requests: their blocks are freed
and every other caller's requests run on, with the outputs they would have had without it. A
submission that raises (an invalid request) fails only its handle; a logits hook that raises
fails only the requests it raised for (they end with ``finish_reason="error"``, see
:meth:`LLMEngine.apply_logits_hook`). A step that raises aborts the requests of that step's
batch (see :meth:`LLMEngine.step`) and hands the exception to their callers; the loop keeps
serving. Only if scheduling itself fails is the engine declared dead:
every caller, present and future, then gets :class:`EngineDeadError`.

A submission may carry an allowance guard (:mod:`metagen.engine.allowance_guard`): before every
step the loop lets it stop the submission's requests that their allowance (tokens, FLOPs, a
deadline) no longer pays for; they finish with ``stop_reason="budget"`` and keep their tokens.

Thread-safety contract: after a loop owns an engine, call the engine only through the loop
(:meth:`EngineLoop.call` runs any function on the engine between steps, e.g. ``check_integrity``).
The loop thread is a daemon started at the first submission; :meth:`close` stops it.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any, TypeVar

from metagen.engine.allowance_guard import AllowanceGuard
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.outputs import RequestOutput, StreamDelta
from metagen.engine.stream_deltas import DeltaTracker
from metagen.errors import EngineDeadError

T = TypeVar("T")
Submission = Callable[[LLMEngine], list[str]]
_POLL_S = 0.5  # a waiting caller wakes at least this often, so signals reach it promptly
_IDLE_WAIT_S = 0.05  # a step that scheduled nothing (all waiting on blocks) waits this long


class RequestHandle:
    """A caller's view of one submission: its outputs, in the order its request ids were given.

    Sync callers use :meth:`result` / :meth:`deltas`; asyncio callers :meth:`aresult` /
    :meth:`adeltas` (the handle is then bound to the running event loop). Leaving either early
    -- an exception, a timeout, ``break`` out of the deltas, a cancelled task -- aborts the
    submission's requests.
    """

    def __init__(self, loop: EngineLoop, stream: bool, aio: asyncio.AbstractEventLoop | None,
                 guard: AllowanceGuard | None = None):
        self._loop, self.stream, self._aio = loop, stream, aio
        self.guard = guard  # stops the requests in flight when their allowance is spent
        self._events: Any = asyncio.Queue() if aio is not None else queue.SimpleQueue()
        self.request_ids: list[str] = []
        self._outputs: dict[str, RequestOutput] = {}
        self._trackers: list[DeltaTracker] = []
        self.outputs: list[RequestOutput] | None = None  # once finished, in request-id order
        self.done = False  # set by the loop thread once the final event is pushed
        self.cancelled = False

    # -- loop side (engine thread) ---------------------------------------------------------------

    def _push(self, kind: str, value: Any) -> None:
        if kind != "delta":
            self.done = True
        if self._aio is None:
            self._events.put((kind, value))
            return
        try:
            self._aio.call_soon_threadsafe(self._events.put_nowait, (kind, value))
        except RuntimeError:  # the caller's event loop is closed: nobody waits any more
            self.cancelled = True

    # -- caller side -----------------------------------------------------------------------------

    def result(self, timeout: float | None = None) -> list[RequestOutput]:
        """Block until every request finished; their outputs. Raises what failed them, or
        ``TimeoutError`` after ``timeout`` seconds (the requests are then aborted)."""
        for kind, value in self._sync_events(timeout):
            if kind == "done":
                return value  # type: ignore[no-any-return]
        raise AssertionError("unreachable: a handle ends with 'done' or an error")

    def deltas(self, timeout: float | None = None) -> Iterator[StreamDelta]:
        """The stream deltas as they come (a streaming handle), ending when every request has
        finished; raises what failed them."""
        for kind, value in self._sync_events(timeout):
            if kind == "delta":
                yield value
            else:
                return

    def _sync_events(self, timeout: float | None) -> Iterator[tuple[str, Any]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                wait = _POLL_S if deadline is None else min(_POLL_S, deadline - time.monotonic())
                if wait <= 0:
                    raise TimeoutError(f"requests {self.request_ids} did not finish in "
                                       f"{timeout} s; they were aborted")
                try:
                    kind, value = self._events.get(timeout=wait)
                except queue.Empty:
                    continue
                yield kind, self._accept(kind, value)
                if kind == "done":
                    return
        finally:
            self.cancel()  # a no-op once the loop has sent the last event

    async def aresult(self) -> list[RequestOutput]:
        """:meth:`result` for asyncio callers (cancelling the awaiting task aborts)."""
        async for kind, value in self._async_events():
            if kind == "done":
                return value  # type: ignore[no-any-return]
        raise AssertionError("unreachable: a handle ends with 'done' or an error")

    async def adeltas(self) -> AsyncIterator[StreamDelta]:
        """:meth:`deltas` for asyncio callers."""
        async for kind, value in self._async_events():
            if kind == "delta":
                yield value

    async def _async_events(self) -> AsyncIterator[tuple[str, Any]]:
        try:
            while True:
                kind, value = await self._events.get()
                yield kind, self._accept(kind, value)
                if kind == "done":
                    return
        finally:
            self.cancel()  # a no-op once the loop has sent the last event

    def _accept(self, kind: str, value: Any) -> Any:
        """One event from the loop: raise the failure it carries, keep the final outputs."""
        if kind == "error":
            raise value
        if kind == "done":
            self.outputs = value
        return value

    def cancel(self) -> None:
        """Abort the submission's requests (a no-op once they finished)."""
        if not self.done and not self.cancelled:
            self.cancelled = True
            self._loop._enqueue(("cancel", self))


class EngineLoop:
    """The thread that steps an engine for every caller (see the module docstring)."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._cond = threading.Condition()
        self._inbox: deque[tuple[str, Any]] = deque()
        self._owner: dict[str, RequestHandle] = {}  # live request id -> its handle
        self._live: list[RequestHandle] = []  # handles with requests in the engine
        self._thread: threading.Thread | None = None
        self._dead: EngineDeadError | None = None

    # -- caller side -----------------------------------------------------------------------------

    def submit(self, submission: Submission, *, stream: bool = False,
               aio: bool = False, guard: AllowanceGuard | None = None) -> RequestHandle:
        """Run ``submission(engine)`` in the loop before its next step; a handle on the requests
        it adds. ``aio=True`` binds the handle to the running asyncio event loop. A ``guard``
        is asked before every step and stops the requests when their allowance is spent
        (:mod:`metagen.engine.allowance_guard`)."""
        handle = RequestHandle(self, stream, asyncio.get_running_loop() if aio else None, guard)
        self._enqueue(("submit", (handle, submission)))
        return handle

    def call(self, fn: Callable[[LLMEngine], T], timeout: float | None = None) -> T:
        """Run ``fn(engine)`` in the loop between two steps and return what it returns (or raise
        what it raises). For inspection (``check_integrity``, stats) from another thread."""
        box: queue.SimpleQueue[tuple[bool, Any]] = queue.SimpleQueue()
        self._enqueue(("call", (fn, box)))
        ok, value = box.get(timeout=timeout)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop the loop: callers still waiting get :class:`EngineDeadError`; requests stay
        aborted. Idempotent."""
        self._enqueue(("close", None))
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._dead is None

    @property
    def pending(self) -> int:
        """Submissions, cancellations and calls not yet taken up by the loop."""
        with self._cond:
            return len(self._inbox)

    def _enqueue(self, item: tuple[str, Any]) -> None:
        with self._cond:
            if self._dead is not None and item[0] != "cancel":
                self._reject(item, self._dead)
                return
            self._inbox.append(item)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="metagen-engine",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    # -- loop side -------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._serve()
        except EngineDeadError as exc:
            self._die(exc)
        except BaseException as exc:  # noqa: BLE001 -- a bug here must not leave callers hanging
            self._die(EngineDeadError(f"the engine loop failed: {exc!r}", exc))

    def _serve(self) -> None:
        engine = self.engine
        while True:
            with self._cond:
                while not self._inbox and not engine.has_unfinished():
                    self._cond.wait()
                items = list(self._inbox)
                self._inbox.clear()
            for i, (kind, value) in enumerate(items):
                if kind == "close":
                    self._die(EngineDeadError("the engine loop was closed"), items[i + 1:])
                    return
                self._apply(kind, value)
            self._enforce()
            if not engine.has_unfinished():
                continue
            steps = engine.counters.steps
            try:
                outputs = engine.step()
            except BaseException as exc:  # noqa: BLE001 -- handed to the callers it failed
                if not self._fail_lost(exc):
                    raise EngineDeadError(f"the engine failed outside a request: {exc!r}",
                                          exc) from exc
                continue
            self._dispatch(outputs)
            if engine.counters.steps == steps:  # nothing could run: wait for a caller, not spin
                with self._cond:
                    if not self._inbox:
                        self._cond.wait(_IDLE_WAIT_S)

    def _apply(self, kind: str, value: Any) -> None:
        if kind == "submit":
            handle, submission = value
            if handle.cancelled:
                return
            try:
                rids = submission(self.engine)
            except BaseException as exc:  # noqa: BLE001 -- a bad request fails its caller only
                handle._push("error", exc)
                return
            handle.request_ids = list(rids)
            if handle.stream:
                handle._trackers = [DeltaTracker(self.engine.requests[r]) for r in rids]
            for r in rids:
                self._owner[r] = handle
            self._live.append(handle)
            if not rids:
                self._finish(handle)
        elif kind == "cancel":
            self._abort(value)
        elif kind == "call":
            fn, box = value
            try:
                box.put((True, fn(self.engine)))
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the calling thread
                box.put((False, exc))

    def _enforce(self) -> None:
        """Before a step: each guarded handle's guard stops what its allowance no longer pays
        for; the outputs of the requests it finished go to their handle."""
        stopped: list[RequestOutput] = []
        for handle in self._live:
            if handle.guard is not None:
                live = [r for r in handle.request_ids if r in self._owner]
                stopped += handle.guard.enforce(self.engine, live, list(handle._outputs.values()))
        if stopped:
            self._dispatch(stopped)

    def _dispatch(self, outputs: list[RequestOutput]) -> None:
        for out in outputs:
            handle = self._owner.pop(out.request_id, None)
            if handle is not None:
                handle._outputs[out.request_id] = out
        for handle in list(self._live):
            for tracker in handle._trackers:
                for delta in tracker.deltas():
                    handle._push("delta", delta)
            if len(handle._outputs) == len(handle.request_ids):
                self._finish(handle)

    def _finish(self, handle: RequestHandle) -> None:
        self._live.remove(handle)
        handle._push("done", [handle._outputs[r] for r in handle.request_ids])

    def _abort(self, handle: RequestHandle) -> None:
        """Abort a handle's requests that are still in the engine; it gets no more events."""
        for r in handle.request_ids:
            if self._owner.pop(r, None) is not None:
                self.engine.abort(r)
        if handle in self._live:
            self._live.remove(handle)

    def _fail_lost(self, exc: BaseException) -> bool:
        """After a failed step: hand ``exc`` to the callers whose requests the engine aborted.
        False when no live request was among them (the failure was not a request's)."""
        lost = [h for h in self._live
                if any(r in self._owner and r not in self.engine.requests for r in h.request_ids)]
        for handle in lost:
            self._abort(handle)
            handle._push("error", exc)
        return bool(lost)

    def _die(self, error: EngineDeadError, taken: Sequence[tuple[str, Any]] = ()) -> None:
        """Refuse everything from now on: live handles, ``taken`` items not yet applied and
        whatever is still queued get ``error``."""
        with self._cond:
            self._dead = error
            pending = list(taken) + list(self._inbox)
            self._inbox.clear()
        for handle in list(self._live):
            self._abort(handle)
            handle._push("error", error)
        for item in pending:
            self._reject(item, error)

    @staticmethod
    def _reject(item: tuple[str, Any], error: EngineDeadError) -> None:
        kind, value = item
        if kind == "submit":
            value[0]._push("error", error)
        elif kind == "call":
            value[1].put((False, error))
