"""AllowanceGuard: keeps one submission's sampling requests within an
:class:`~metagen.allowance.Allowance`, between the engine's steps.

The engine loop asks :meth:`AllowanceGuard.enforce` before every step. It stops (with
``LLMEngine.stop_early``, ``stop_reason="budget"``) every live sequence of the submission once
the deadline has passed or the FLOPs measured for its requests reach the FLOP allowance, and
otherwise as many sequences as :func:`~metagen.allowance.samples_to_stop` names, so that the
tokens they may emit in the next step fit what is left of the token pool. A sequence may emit
one token per step, ``num_speculative_tokens + 1`` with a speculator, and a sequence still to
fork its ``k`` sibling samples emits for ``k + 1``.
"""

from __future__ import annotations

from collections.abc import Sequence

from metagen.allowance import BUDGET_STOP, Allowance, samples_to_stop
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.outputs import RequestOutput


class AllowanceGuard:
    """The allowance of one submission; ``pool`` is its token pool (the allowance's tokens, or
    fewer when its FLOPs pay for fewer; ``None``: no token limit)."""

    def __init__(self, allowance: Allowance, pool: int | None) -> None:
        self.allowance = allowance
        self.pool = pool

    def enforce(self, engine: LLMEngine, live: Sequence[str], done: Sequence[RequestOutput]
                ) -> list[RequestOutput]:
        """Stop what must stop before the next step, among the requests ``live`` (ids still in
        the engine) given the submission's finished outputs ``done``; the outputs of the
        requests this finished."""
        reqs = [engine.requests[r] for r in live if r in engine.requests]
        flops = sum(o.flops for o in done) + sum(r.flops for r in reqs)
        limit = self.allowance.flops
        if self.allowance.expired() or (limit is not None and flops >= limit):
            return _stopped(engine, [(r.request_id, None) for r in reqs])
        if self.pool is None:
            return []
        spent = sum(o.generated_tokens for o in done) + sum(r.generated_tokens for r in reqs)
        per_step = 1 if engine.speculator is None else engine.config.num_speculative_tokens + 1
        seqs = [(r.request_id, s) for r in reqs for s in r.seqs if not s.is_finished]
        lengths = [len(s.state.output_ids) for _, s in seqs]
        demands = [per_step * (1 + s.pending_fork) for _, s in seqs]
        chosen = samples_to_stop(lengths, demands, self.pool - spent)
        by_request: dict[str, set[int]] = {}
        for i in chosen:
            rid, seq = seqs[i]
            by_request.setdefault(rid, set()).add(seq.seq_id)
        return _stopped(engine, list(by_request.items()))


def _stopped(engine: LLMEngine, cuts: Sequence[tuple[str, set[int] | None]]
             ) -> list[RequestOutput]:
    outs = []
    for rid, seq_ids in cuts:
        out = engine.stop_early(rid, seq_ids, BUDGET_STOP)
        if out is not None:
            outs.append(out)
    return outs
