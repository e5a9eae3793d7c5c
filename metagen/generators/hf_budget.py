"""RowGuard: keeps one ``HFGenerator`` call's rows within an :class:`~metagen.allowance.Allowance`.

``transformers`` decodes every row of a batch in lockstep, one token per step; before metagen
chooses the tokens of a step (:class:`~metagen.generators.hf_rows.RowTracker`), the guard stops
rows: every running row once the deadline has passed or the FLOPs of the call's rows
(:meth:`FlopModel.sequence`, as the backend counts them) reach the FLOP allowance, else the rows
:func:`~metagen.allowance.samples_to_stop` names so that one more token each fits what is left
of the token pool. The pool is shared by all rows of the call: a call split into several
``model.generate`` batches (``max_batch_rows``) gives a later batch what the earlier left.
A stopped row ends with ``finish_reason="length"`` and ``stop_reason="budget"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from metagen.allowance import BUDGET_STOP, Allowance, samples_to_stop, token_room
from metagen.generators.flops import FlopModel
from metagen.generators.hf_rows import Row


class RowGuard:
    """The allowance of one call over all its ``rows`` (see the module docstring)."""

    def __init__(self, allowance: Allowance, rows: Sequence[Row], model: FlopModel,
                 max_tokens: int) -> None:
        self.allowance = allowance
        self.rows = rows
        self.model = model
        self.pool = allowance.generated_tokens
        if allowance.flops is not None:
            prefill = sum(model.forward(0, len(r.seq.prompt_ids)) for r in rows)
            longest = max(len(r.seq.prompt_ids) for r in rows) + max_tokens
            room = token_room(allowance.flops, prefill, model.forward(longest - 1, 1))
            self.pool = room if self.pool is None else min(self.pool, room)

    @property
    def runs_nothing(self) -> bool:
        """True when the allowance pays for no token at all (the call should not run)."""
        return self.allowance.expired() or (self.pool is not None and self.pool < 1)

    def enforce(self, active: Sequence[Row]) -> None:
        """Before a step: stop the rows among ``active`` (running, in sample order) that the
        allowance no longer pays for."""
        flops = sum(self.model.sequence(len(r.seq.prompt_ids), len(r.seq.output_ids))
                    for r in self.rows) if self.allowance.flops is not None else 0.0
        if self.allowance.expired() or (self.allowance.flops is not None
                                        and flops >= self.allowance.flops):
            chosen: Sequence[int] = range(len(active))
        elif self.pool is None:
            return
        else:
            spent = sum(len(r.seq.output_ids) for r in self.rows)
            chosen = samples_to_stop([len(r.seq.output_ids) for r in active],
                                     [1] * len(active), self.pool - spent)
        for i in chosen:
            active[i].finish, active[i].stop_reason = "length", BUDGET_STOP
