"""The output-constraint stage of the logits pipeline: each constrained row keeps only the tokens
its language allows next (EOS only where the language accepts).

One bitmask fill per constrained row per step (llguidance writes 1 bit per token into a shared
``(B, ceil(V / 32))`` int32 buffer), then one unpack and one ``masked_fill`` for the batch. Rows
without a constraint are untouched. A row whose output the language refused (a driver's token, a
speculative draft past a refused one) allows only its EOS tokens (every token when the model has
none, so that a verified position past a refused draft is never an empty row).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.decoding.masks import NEG_INF, unpack_bitmask
from metagen.decoding.state import SequenceState


def constraint_allowed(seqs: Sequence[SequenceState], vocab_size: int) -> torch.Tensor:
    """``(B, V)`` bool: the tokens each row may take next (all True for unconstrained rows).

    Syncs each row's matcher to its ``output_ids`` first; rows sharing one matcher (the
    positions of a speculative verification) are filled in order, each after its own sync."""
    words = (vocab_size + 31) // 32
    bitmask = torch.full((len(seqs), words), -1, dtype=torch.int32)
    for b, s in enumerate(seqs):
        c = s.constraint
        if c is None:
            continue
        if c.sync(s.output_ids):
            c.fill(bitmask, b)
        elif s.eos_token_ids:
            bitmask[b] = 0
            for t in s.eos_token_ids:
                if 0 <= t < 32 * words:
                    bitmask[b, t // 32] |= _bit(t % 32)
    return unpack_bitmask(bitmask, vocab_size)


def _bit(i: int) -> int:
    """int32 value with bit ``i`` set (bit 31 is the sign bit)."""
    return (1 << i) if i < 31 else -(1 << 31)


def apply_constraints(logits: torch.Tensor, seqs: Sequence[SequenceState]) -> torch.Tensor:
    """``logits`` with every token a row's constraint forbids set to ``-inf`` (a new tensor)."""
    allowed = constraint_allowed(seqs, logits.shape[1]).to(logits.device)
    return logits.masked_fill(~allowed, NEG_INF)
