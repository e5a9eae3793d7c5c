"""The scoring rows of a step: the log-probabilities a scoring sequence collects from the logits
of every position it computes (see :mod:`metagen.engine.engine_scoring`, which makes such
sequences). :meth:`~metagen.engine.llm_engine.LLMEngine.step` hands each scoring row's logits to
:func:`collect_scores`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from metagen.decoding import top_logprobs_rows
from metagen.errors import NumericalError

if TYPE_CHECKING:
    from metagen.engine.sequence import Sequence as Seq


def collect_scores(seq: Seq, start: int, logits: torch.Tensor) -> bool:
    """Add the continuation logprobs predicted by rows of ``logits`` (n, V) for positions
    start .. start+n-1 (row r predicts token start+r+1) to ``seq.score_logprobs``. Returns
    whether the sequence is done: all its tokens computed, or a logprob not finite (then
    ``seq.error`` holds a NumericalError and its blocks must not be cached)."""
    n = logits.shape[0]
    # after a preemption the tokens are recomputed: skip targets already collected
    lo = max(seq.score_from + len(seq.score_logprobs), start + 1)  # type: ignore[operator]
    hi = min(start + n, len(seq.token_ids) - 1)
    if lo <= hi:
        rows = logits[lo - 1 - start:hi - start]  # (k, V)
        target = torch.tensor(seq.token_ids[lo:hi + 1], device=rows.device)
        full = torch.log_softmax(rows.float(), -1)
        lp = full.gather(1, target[:, None])[:, 0]  # (k,)
        seq.score_logprobs.extend(lp.tolist())
        if seq.score_top is not None:
            tops = top_logprobs_rows(full, [seq.score_top] * len(lp))
            seq.score_tops.extend(t or {} for t in tops)
            seq.score_ranks.extend(((full > lp[:, None]).sum(-1) + 1).tolist())
        bad = (~torch.isfinite(lp)).nonzero()
        if len(bad):
            pos = lo + int(bad[0, 0])
            seq.error = NumericalError(
                f"log p(token {pos}) of scoring request {seq.request.request_id} is "
                f"{seq.score_logprobs[pos - seq.score_from]}")  # type: ignore[operator]
            return True
    return seq.num_uncomputed == 0
