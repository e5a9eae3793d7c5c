"""The sampled rows' logits as one ``(B, V)`` tensor, without a copy when they already are one.

The runner returns each request's logits as a view into one ``(N, V)`` tensor; in a decode step
of ``B`` sampled rows those views are ``B`` consecutive rows, so the batch the sampler reads is
that tensor's own memory. Stacking them with ``torch.cat`` would copy ``B x V`` floats (2 MB for
16 rows of a 32000-token vocabulary) right after the LM head wrote them.
"""

from __future__ import annotations

import torch


def stack_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    """``(B, V)`` of the ``(1, V)`` tensors ``rows`` (B >= 1): a view of their memory when row
    ``b`` starts ``b * V`` elements after row 0 in one storage (each contiguous), else a copy
    (``torch.cat``). The view shares memory with ``rows``: writing one writes the other."""
    first = rows[0]
    if len(rows) == 1:
        return first
    if first.dim() != 2 or first.shape[0] != 1 or not first.is_contiguous():
        return torch.cat(rows)
    v, dtype = first.shape[1], first.dtype
    storage = first.untyped_storage().data_ptr()
    offset = first.storage_offset()
    for b, r in enumerate(rows):
        if (r.storage_offset() != offset + b * v or r.shape != first.shape
                or r.dtype != dtype or not r.is_contiguous()
                or r.untyped_storage().data_ptr() != storage):
            return torch.cat(rows)
    return first.as_strided((len(rows), v), (v, 1))
