"""RequestDriver: what replaces sampling for the rows of one request (beam search, drafting).

A request added with a driver (``LLMEngine.add_request`` does so for ``BeamSearchParams``) runs in
the engine's continuous batch like any other: its sequences are scheduled, prefilled, preempted
and share the block manager and the radix cache with every other request. The difference is
what happens when a step has computed a row's logits: instead of being sampled, the rows of
the request ready in that step are handed to ``driver.on_logits(engine, seqs, logits)``, which
advances the request through the engine's own operations:

- ``engine.extend(seq_id, tokens)`` appends tokens (to be computed by the next step),
- ``engine.fork(seq_id, n)`` adds ``n`` sequences sharing the parent's KV blocks,
- ``engine.finish(seq_id, reason)`` ends a sequence (its full blocks go to the prefix cache),
- ``engine.truncate(seq_id, n, then)`` rolls a sequence back.

A sequence whose logits were handed over and that got no new token is *parked*: it holds its
blocks and is not scheduled until the driver extends it (a driver waiting for every beam of a
request parks the ready ones). When every sequence of the request is finished, the engine
returns ``driver.output(request)`` as the request's :class:`~metagen.engine.outputs.RequestOutput`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.outputs import RequestOutput
    from metagen.engine.sequence import Request, Sequence as Seq


class RequestDriver(Protocol):
    def on_logits(self, engine: LLMEngine, seqs: Sequence[Seq], logits: torch.Tensor) -> None:
        """``logits`` (len(seqs), V) float32: the next-token logits of each of ``seqs`` (the
        request's rows computed in this step, in batch order)."""
        ...

    def output(self, request: Request) -> RequestOutput:
        """The finished request's output."""
        ...
