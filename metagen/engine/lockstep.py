"""Lockstep: the next-token logits of a main engine's rows under auxiliary models.

:class:`LockstepLogits` runs inside the main engine's ``logits_hook``: given the rows about to be
sampled (their :class:`SequenceState`: prompt + output so far), it returns, for every auxiliary
engine, the ``(B, V)`` logits of the same token sequences. Each auxiliary model runs on its own
:class:`~metagen.engine.llm_engine.LLMEngine` (own KV cache, prefix cache, continuous batching):
every main row has a mirror request there (:mod:`metagen.engine.mirrors`) that follows the row's
tokens, so a decode step costs each auxiliary engine one batched step over the new token of
every row (a new row: its prompt, chunked and prefix-cached as usual); ``n > 1`` samples each
get their own mirror. Mirrors of sequences that left the main engine are aborted at the next
call (until then they hold their blocks). The compute of a row's mirrors (their FLOPs,
recomputation included) is added to the main row's request, so its output's ``flops`` covers
every model. Single-threaded: it runs on the thread that steps the main engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from metagen.decoding import SequenceState
from metagen.engine.mirrors import Mirrors

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.outputs import RequestOutput
    from metagen.engine.sequence import Request, Sequence as Seq


class _Collector:
    """A mirror driver that keeps the last logits of each mirror row (and parks it)."""

    def __init__(self) -> None:
        self.logits: dict[int, torch.Tensor] = {}  # mirror seq_id -> (V,)

    def on_logits(self, engine: LLMEngine, seqs: Sequence[Seq], logits: torch.Tensor) -> None:
        for i, seq in enumerate(seqs):
            self.logits[seq.seq_id] = logits[i]

    def output(self, request: Request) -> RequestOutput:
        from metagen.engine.outputs import RequestOutput

        return RequestOutput(request.request_id, request.prompt_ids, [], [None])


class LockstepLogits:
    """The auxiliary logits of a main engine's rows (see the module docstring). The auxiliary
    engines must hold any sequence the main one can (``max_model_len`` at least as large)."""

    def __init__(self, main: LLMEngine, aux: Sequence[LLMEngine]) -> None:
        self.main = main
        self._collectors = [_Collector() for _ in aux]
        self.mirrors = [Mirrors(engine, c) for engine, c in zip(aux, self._collectors)]
        self._held: dict[int, SequenceState] = {}  # key (id of a main row's state) -> state
        self._live: dict[int, Seq] = {}  # key -> the main engine's live sequence

    def __call__(self, states: Sequence[SequenceState]) -> list[torch.Tensor]:
        """``[(B, V) float32 logits of the rows of `states` under each auxiliary model]``."""
        self._forget_finished()
        keys = [id(s) for s in states]
        for key, state in zip(keys, states):
            self._held[key] = state  # held: an id is never reused while its mirror lives
        out = [self._logits(m, c, keys, states) for m, c in zip(self.mirrors, self._collectors)]
        for key in keys:
            for m in self.mirrors:
                self._charge(m, key)
        return out

    def _forget_finished(self) -> None:
        """Abort the mirrors of rows that left the main engine."""
        self._live = {id(s.state): s for s in self.main.seqs.values() if not s.is_finished}
        for key in [k for k in self._held if k not in self._live]:
            del self._held[key]
            for m in self.mirrors:
                m.forget(key)

    def _charge(self, mirrors: Mirrors, key: int) -> None:
        """Move the FLOPs of the mirror of ``key`` to the main row's request."""
        mirror, row = mirrors.request_of(key), self._live.get(key)
        if mirror is not None and row is not None:
            row.request.flops += mirror.flops
            mirror.flops = 0.0

    def _logits(self, mirrors: Mirrors, collector: _Collector, keys: list[int],
                states: Sequence[SequenceState]) -> torch.Tensor:
        """Step the auxiliary engine of ``mirrors`` until every row has its logits. When a step
        can schedule nothing (the cache is held by parked mirrors), the mirrors not awaiting
        logits are aborted (charged first; their full blocks stay in the prefix cache), so
        each such step frees blocks or raises when there are none to free."""
        engine = mirrors.engine
        collector.logits.clear()
        wanted: dict[int, int] = {}  # mirror seq_id -> key
        for key, state in zip(keys, states):
            seq = mirrors.sync(key, state.prompt_ids + state.output_ids)
            if seq is None:
                raise RuntimeError(f"an auxiliary engine cannot hold a row of "
                                   f"{len(state.prompt_ids) + len(state.output_ids)} tokens "
                                   f"(its max_model_len is {engine.max_model_len})")
            wanted[seq.seq_id] = key
        while pending := {s for s in wanted if s not in collector.logits}:
            steps = engine.counters.steps
            engine.step()
            if engine.counters.steps > steps:
                continue
            parked = [k for k in mirrors.keys() if (r := mirrors.request_of(k)) is None
                      or r.seqs[0].seq_id not in pending]
            if not parked:
                raise RuntimeError("an auxiliary engine cannot schedule its rows (KV cache "
                                   "too small for them)")
            for key in parked:
                self._charge(mirrors, key)
                mirrors.forget(key)
        out = torch.stack([collector.logits.pop(s) for s in wanted])
        return out.to(torch.float32)
