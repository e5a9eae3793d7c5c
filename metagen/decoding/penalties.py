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


def token_counts(rows: Sequence[Sequence[int] | None], vocab_size: int,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """``(B, V)`` float32 counts of each token id per row (ids outside ``[0, V)`` are ignored)."""
    flat: list[int] = []
    for b, ids in enumerate(rows):
        if ids:
            base = b * vocab_size
            flat.extend(base + t for t in ids if 0 <= t < vocab_size)
    size = len(rows) * vocab_size
    if not flat:
        return torch.zeros((len(rows), vocab_size), dtype=torch.float32, device=device)
    counts = torch.bincount(torch.tensor(flat, dtype=torch.int64), minlength=size)
    return counts.view(len(rows), vocab_size).to(device=device, dtype=torch.float32)


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
