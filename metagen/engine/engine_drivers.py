"""Single-caller drivers of :class:`~metagen.engine.llm_engine.LLMEngine` that loop over its
``step()`` in the calling thread: :func:`generate` (run requests to completion),
:func:`run_until_done` and :func:`stream` (text deltas with stop strings held back; stopping the
iteration aborts the request). Functions of an explicit engine, which ``LLMEngine`` exposes as
methods. They step the engine themselves, so they are for a single caller: many callers share
an engine through :mod:`metagen.engine.loop`, whose thread is then the only one to step it."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from metagen.engine.outputs import RequestOutput, StreamDelta
from metagen.engine.stream_deltas import DeltaTracker
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine


def generate(engine: LLMEngine, prompts: Sequence[Sequence[int]],
             params: SamplingParams | Sequence[SamplingParams] | None = None
             ) -> list[RequestOutput]:
    """Run requests to completion (alongside whatever else is queued); outputs in order.
    Every request is validated before any is queued."""
    plist = list(params) if isinstance(params, Sequence) else [params or SamplingParams()] * \
        len(prompts)
    if len(plist) != len(prompts):
        raise InvalidParameterError("params", f"<{len(plist)} params>",
                                    f"need one per prompt ({len(prompts)})")
    for p, sp in zip(prompts, plist):
        engine.validate(p, sp)
    ids = [engine.add_request(p, sp) for p, sp in zip(prompts, plist)]
    return run_until_done(engine, ids)


def run_until_done(engine: LLMEngine, request_ids: Sequence[str]) -> list[RequestOutput]:
    """Step until every request in ``request_ids`` has finished; their outputs in order."""
    want = set(request_ids)
    got: dict[str, RequestOutput] = {}
    while want - got.keys():
        if not engine.has_unfinished():
            raise RuntimeError(f"requests {sorted(want - got.keys())} vanished (aborted?)")
        for out in engine.step():
            got[out.request_id] = out
    return [got[r] for r in request_ids]


def stream(engine: LLMEngine, prompt_ids: Sequence[int], params: SamplingParams | None = None
           ) -> Iterator[StreamDelta]:
    """Yield text/token deltas of one request as they are generated (other queued requests
    advance too). Text is held back while it could be the start of a stop string."""
    rid = engine.add_request(prompt_ids, params)
    tracker = DeltaTracker(engine.requests[rid])
    done = False
    try:
        while not done:
            done = any(o.request_id == rid for o in engine.step())
            yield from tracker.deltas()
    finally:
        if not done:  # the consumer stopped early: free the request's blocks
            engine.abort(rid)
