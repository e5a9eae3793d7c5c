"""Per-row decoding inside ``transformers.generate``: metagen chooses every token.

``transformers`` runs its own loop (KV cache, left padding, position ids); at each step it hands
the ``(B, V)`` next-token logits to :class:`MetagenLogitsProcessor`, which asks a
:class:`RowTracker` for the token of every row. The tracker runs
:func:`metagen.decoding.decode_step` on the rows still running (one
:class:`~metagen.decoding.state.SequenceState` each), appends the tokens, records their raw
logprobs, and decides when a row finishes. The processor returns scores that are ``-inf``
everywhere except the chosen token, so ``generate(do_sample=False)``'s argmax picks exactly
metagen's choice; :class:`TrackerStoppingCriteria` reports the finished rows back to the loop.

A row finishes, checked in this order after each token:

- ``"stop"`` on an end token of the model (unless ``ignore_eos``), ``stop_reason`` ``None``;
- ``"stop"`` on a ``stop_token_ids`` token, ``stop_reason`` = that id;
- ``"stop"`` when the continuation text contains a stop string (checked once ``min_tokens``
  tokens exist; the string may span token boundaries), ``stop_reason`` = the string; the text is
  cut before it;
- ``"length"`` at ``max_tokens`` tokens;
- ``"error"`` when its logits hold NaN/+inf (V22): the row stops, the others go on.

Before a step, an allowance's guard may end rows (``"length"``, ``stop_reason="budget"``;
:mod:`metagen.generators.hf_budget`).

Finished rows keep being computed by ``transformers`` (their tokens are ignored) until every row is
done, so the tracker never touches their state again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch
from transformers import LogitsProcessor, StoppingCriteria

from metagen.decoding import SequenceState, decode_step
from metagen.errors import NumericalError
from metagen.generators.tokenize import continuation_text, find_stop
from metagen.types import Completion, FinishReason

LogitsHook = Callable[[torch.Tensor, Sequence[SequenceState]], torch.Tensor]


@dataclass(slots=True)
class Row:
    """One sequence being generated: sample ``seq.sample_index`` of prompt ``prompt_index``."""

    prompt_index: int
    seq: SequenceState
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    finish: FinishReason | None = None
    stop_reason: str | int | None = None
    stopped_text: str | None = None  # the text cut before a stop string
    checked_chars: int = 0           # continuation characters already searched for stops
    error: NumericalError | None = None

    def text(self, tokenizer: Any, ids: Sequence[int]) -> str:
        """The text of output ``ids`` after the prompt (after the text token healing removed
        from it, when it did)."""
        heal = self.seq.heal
        return continuation_text(tokenizer, self.seq.prompt_ids, ids,
                                 heal.removed_ids if heal is not None else ())

    def completion(self, tokenizer: Any) -> Completion:
        """The finished row as a :class:`Completion` (see the module docstring)."""
        ids = self.seq.output_ids
        if self.stopped_text is not None:
            text = self.stopped_text
        else:
            ended_by_token = self.finish == "stop"
            text = self.text(tokenizer, ids[:-1] if ended_by_token else ids)
        want_top = self.seq.params.logprobs is not None
        return Completion(
            text=text, token_ids=tuple(ids), logprobs=tuple(self.logprobs),
            cumulative_logprob=float(sum(self.logprobs)),
            finish_reason=self.finish or "length",
            top_logprobs=tuple(self.top_logprobs) if want_top else None,
            stop_reason=self.stop_reason)


class RowStopper(Protocol):
    """Stops rows before a step (an allowance: :mod:`metagen.generators.hf_budget`)."""

    def enforce(self, active: Sequence[Row]) -> None:
        """Set ``finish`` on the rows of ``active`` (the running ones) that must stop now."""
        ...


class RowTracker:
    """Chooses the tokens of a batch of rows and tracks which rows are finished."""

    def __init__(self, rows: list[Row], tokenizer: Any, eos_ids: Sequence[int], pad_id: int,
                 logits_hook: LogitsHook | None = None, guard: RowStopper | None = None) -> None:
        self.rows = rows
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(eos_ids)
        self.pad_id = pad_id
        self.logits_hook = logits_hook
        self.guard = guard

    def done_mask(self) -> torch.Tensor:
        """``(B,)`` bool: rows that are finished."""
        return torch.tensor([r.finish is not None for r in self.rows], dtype=torch.bool)

    def step(self, logits: torch.Tensor) -> torch.Tensor:
        """Choose the next token of every row from ``logits`` ``(B, V)``; ``(B,)`` int64 ids
        (``pad_id`` for rows that are finished)."""
        if logits.dim() != 2 or logits.shape[0] != len(self.rows):
            raise ValueError(f"expected logits of shape ({len(self.rows)}, V), got "
                             f"{tuple(logits.shape)}")
        chosen = torch.full((len(self.rows),), self.pad_id, dtype=torch.long)
        if self.guard is not None:  # an allowance may stop rows before this step's tokens
            self.guard.enforce([r for r in self.rows if r.finish is None])
        active = [i for i, r in enumerate(self.rows) if r.finish is None]
        if not active:
            return chosen
        sub = logits[active] if len(active) < len(self.rows) else logits  # (A, V)
        seqs = [self.rows[i].seq for i in active]
        if self.logits_hook is not None:
            sub = self.logits_hook(sub, seqs)
        out = decode_step(sub, seqs)
        tokens = out.token_list()
        logprobs = out.logprob_list()
        for k, i in enumerate(active):
            row = self.rows[i]
            if k in out.errors:
                row.finish, row.error, row.stop_reason = "error", out.errors[k], "numerical_error"
                continue
            token = int(tokens[k])
            row.seq.append(token)
            row.logprobs.append(float(logprobs[k]))
            top = out.top_logprobs[k]
            if top is not None:
                row.top_logprobs.append(dict(top))
            self._check_finish(row, token)
            chosen[i] = token
        return chosen

    def _check_finish(self, row: Row, token: int) -> None:
        params = row.seq.params
        n_out = len(row.seq.output_ids)
        if token in self.eos_ids and not params.ignore_eos:
            row.finish = "stop"
            return
        if token in params.stop_token_ids:
            row.finish, row.stop_reason = "stop", token
            return
        if params.stop:
            text = row.text(self.tokenizer, row.seq.output_ids)
            hit = find_stop(text, params.stop, row.checked_chars) \
                if n_out >= params.min_tokens else None
            row.checked_chars = len(text)
            if hit is not None:
                row.finish, row.stop_reason, row.stopped_text = "stop", hit[1], text[:hit[0]]
                return
        if n_out >= params.max_tokens:
            row.finish = "length"


class MetagenLogitsProcessor(LogitsProcessor):
    """Returns ``(B, V)`` scores that are 0 at the token metagen chose and ``-inf`` elsewhere."""

    def __init__(self, tracker: RowTracker) -> None:
        self.tracker = tracker

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor
                 ) -> torch.FloatTensor:
        chosen = self.tracker.step(scores).to(scores.device)  # (B,)
        forced = torch.full_like(scores, float("-inf"))       # (B, V)
        forced.scatter_(1, chosen[:, None], 0.0)
        return cast(torch.FloatTensor, forced)  # a float tensor; the stubs name no such type


class TrackerStoppingCriteria(StoppingCriteria):
    """Tells ``transformers`` which rows the tracker has finished."""

    def __init__(self, tracker: RowTracker) -> None:
        self.tracker = tracker

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor,
                 **kwargs: Any) -> torch.BoolTensor:
        return cast(torch.BoolTensor, self.tracker.done_mask().to(input_ids.device))
