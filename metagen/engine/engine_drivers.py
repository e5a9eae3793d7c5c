"""Drivers of :class:`~metagen.engine.llm_engine.LLMEngine` that loop over ``step()``:
``generate`` (run requests to completion), ``run_until_done`` and ``stream`` (text deltas with
stop strings held back; stopping the iteration aborts the request)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from metagen.engine.outputs import RequestOutput, StreamDelta
from metagen.engine.stream_deltas import DeltaTracker
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams


class DriversMixin:
    """Mixed into LLMEngine (uses ``step``, ``add_request``, ``validate``, ``scheduler``)."""

    def generate(self, prompts: Sequence[Sequence[int]],
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
            self.validate(p, sp)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist)]
        return self.run_until_done(ids)

    def run_until_done(self, request_ids: Sequence[str]) -> list[RequestOutput]:
        """Step until every request in ``request_ids`` has finished; their outputs in order."""
        want = set(request_ids)
        got: dict[str, RequestOutput] = {}
        while want - got.keys():
            if not self.scheduler.has_work():
                raise RuntimeError(f"requests {sorted(want - got.keys())} vanished (aborted?)")
            for out in self.step():
                got[out.request_id] = out
        return [got[r] for r in request_ids]

    def stream(self, prompt_ids: Sequence[int], params: SamplingParams | None = None
               ) -> Iterator[StreamDelta]:
        """Yield text/token deltas of one request as they are generated (other queued requests
        advance too). Text is held back while it could be the start of a stop string."""
        rid = self.add_request(prompt_ids, params)
        tracker = DeltaTracker(self.requests[rid])
        done = False
        try:
            while not done:
                done = any(o.request_id == rid for o in self.step())
                yield from tracker.deltas()
        finally:
            if not done:  # the consumer stopped early: free the request's blocks
                self.abort(rid)
