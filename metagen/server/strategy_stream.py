"""Server-sent events of a streamed strategy request (``stream: true`` with a ``metagen``
object).

Before each stage of the strategy (each generate call it makes, whichever strategy it is:
:mod:`metagen.server.strategy_calls`) one progress chunk goes out: a chunk with no choices and
``"metagen": {"progress": {"stage": k, "generated_tokens": ..., "calls": ...,
"scorer_calls": ...}}`` (the usage so far). Then the answer as ordinary chunks: the
role (chat), the chosen text in one delta, the final chunk with ``finish_reason`` and the
answer's ``metagen`` object, the ``usage`` chunk when ``stream_options.include_usage``, then
``data: [DONE]``. A failure is an ``{"error": ...}`` event, then ``data: [DONE]``. Leaving the
iteration early (the client went away) cancels the strategy: its generate call in flight is
aborted and it stops before its next stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from metagen.server.cancellation import Cancellation
from metagen.server.errors import api_error, error_event
from metagen.server.requests import GenerationRequest
from metagen.server.streaming import DONE, Chunks
from metagen.types import Usage

# (cancelled, progress) -> the strategy's whole answer (see metagen.server.strategy)
Answer = Callable[[threading.Event, Callable[[Usage], None]], Awaitable[dict[str, Any]]]


def progress_body(stage: int, usage: Usage) -> dict[str, Any]:
    """The ``metagen.progress`` object before stage ``stage`` (0-based) with ``usage`` so far."""
    return {"stage": stage, "generated_tokens": usage.generated_tokens, "calls": usage.calls,
            "scorer_calls": usage.scorer_calls}


async def strategy_events(req: GenerationRequest, model: str, answer: Answer
                          ) -> AsyncIterator[str]:
    """The events of the strategy request ``req`` that ``answer`` computes (see the module
    docstring)."""
    chunks = Chunks(req, model)
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Usage] = asyncio.Queue()
    cancelled = Cancellation()

    def progress(usage: Usage) -> None:  # called in the strategy's worker thread
        loop.call_soon_threadsafe(queue.put_nowait, usage)

    work = asyncio.ensure_future(answer(cancelled, progress))
    try:
        stage = 0
        while not work.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({work, getter}, return_when=asyncio.FIRST_COMPLETED)
            if not getter.done():
                getter.cancel()
                continue
            yield chunks.event([], extra={"metagen": {"progress":
                                                      progress_body(stage, getter.result())}})
            stage += 1
        try:
            body = work.result()
        except Exception as exc:  # noqa: BLE001 -- reported to the client as an error event
            yield error_event(api_error(exc))
        else:
            for event in _answer_events(req, chunks, body):
                yield event
        yield DONE
    finally:
        if not work.done():
            cancelled.set()
            work.cancel()
            with contextlib.suppress(BaseException):
                await work


def _answer_events(req: GenerationRequest, chunks: Chunks, body: dict[str, Any]) -> list[str]:
    choice = body["choices"][0]
    text = choice["message"]["content"] if req.chat else choice["text"]
    events = []
    if req.chat:
        events.append(chunks.event([{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}]))
    events.append(chunks.event([chunks.choice(0, text, logprobs=choice["logprobs"])]))
    events.append(chunks.event([chunks.choice(0, None if req.chat else "",
                                              choice["finish_reason"])],
                               extra={"metagen": body["metagen"]}))
    if req.include_usage:
        events.append(chunks.event([], body["usage"]))
    return events
