"""Repetition penalties over ``(B, V)`` logits with per-row strengths: pure functions.

- Repetition penalty (Keskar et al. 2019, CTRL; transformers semantics): for every token that
  occurs in the context (prompt + output), a positive logit is divided by the penalty and a
  negative one multiplied by it. 1 disables.
- Presence and frequency penalties (OpenAI semantics): over the *output* tokens,
  ``logit[j] -= frequency * count[j] + presence * (count[j] > 0)``. 0 disables.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.decoding.masks import flat_row_ids


def token_counts(rows: Sequence[Sequence[int] | None], vocab_size: int,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """``(B, V)`` float32 counts of each token id per row (ids outside ``[0, V)`` are ignored)."""
    row_idx, cols = flat_row_ids(rows, vocab_size)
    flat = (row_idx * vocab_size + cols).to(device)
    counts = torch.bincount(flat, minlength=len(rows) * vocab_size)
    return counts.view(len(rows), vocab_size).to(torch.float32)


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor,
                             penalty: torch.Tensor) -> torch.Tensor:
    """``logits`` ``(B, V)``, ``seen`` ``(B, V)`` bool (token occurs in the context),
    ``penalty`` ``(B,)`` > 0."""
    pen = penalty.to(logits.dtype)[:, None]  # (B, 1)
    penalised = torch.where(logits < 0, logits * pen, logits / pen)
    return torch.where(seen, penalised, logits)


def apply_presence_frequency(logits: torch.Tensor, counts: torch.Tensor, presence: torch.Tensor,
                             frequency: torch.Tensor) -> torch.Tensor:
    """``counts`` ``(B, V)`` of output tokens; ``presence``, ``frequency`` ``(B,)``."""
    counts = counts.to(logits.dtype)
    delta = (frequency.to(logits.dtype)[:, None] * counts
             + presence.to(logits.dtype)[:, None] * (counts > 0).to(logits.dtype))
    return logits - delta
