"""Direct steps: a driver's rows forwarded without the engine's step loop.

A speculative draft round is a few steps of the draft engine in a row for the same mirror rows
(:mod:`metagen.engine.draft_proposer`); through :meth:`LLMEngine.step` each of them pays the
scheduler, the batch bookkeeping and the driver's dispatch again -- on an int8 draft about as
much as the draft's own products. :func:`reserve` claims the blocks of all of a round's steps
at once and :func:`forward` runs one step of the rows: the same
:meth:`~metagen.engine.model_runner.ModelRunner.extend` call over the same block tables as the
step loop makes for them, so the KV written and the logits returned are the step loop's bit for
bit. Only rows that the step loop would schedule whole qualify (:func:`eligible`); anything else
(a mirror that is new, waiting or preempted, a long catch-up, a KV window) takes the step loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from metagen.engine.model_runner import NATIVE_ATTENTION_MAX_ROW, ExtendRequest
from metagen.engine.sequence import Status

if TYPE_CHECKING:
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.sequence import Sequence as Seq


def eligible(engine: LLMEngine, seqs: Sequence[Seq]) -> bool:
    """Whether ``seqs`` (driven rows of ``engine``) may take direct steps: each is running with
    its prompt computed and cached and 1 to ``NATIVE_ATTENTION_MAX_ROW`` tokens to compute, the
    engine has no KV window, and the step's tokens fit its token budget."""
    cfg = engine.config
    if not seqs or cfg.kv_window_tokens is not None:
        return False
    total = sum(s.num_uncomputed for s in seqs)
    return total <= cfg.max_num_batched_tokens and all(
        s.status is Status.RUNNING and s.prompt_cached and s.request.driver is not None
        and 1 <= s.num_uncomputed <= NATIVE_ATTENTION_MAX_ROW and s.num_draft == 0
        for s in seqs)


def reserve(engine: LLMEngine, seqs: Sequence[Seq], steps: Sequence[int]) -> bool:
    """Give each ``seqs[j]`` writable blocks for its uncomputed tokens and ``steps[j] - 1``
    more (the tokens its driver appends before its later steps). False when the cache cannot
    hold them all (then some rows may hold blocks ahead, which their next steps use or a
    rollback frees); the step loop, which preempts, is the fallback."""
    return all(engine.scheduler.reserve(s, s.num_uncomputed + n - 1)
               for s, n in zip(seqs, steps))


def forward(engine: LLMEngine, seqs: Sequence[Seq]) -> torch.Tensor:
    """One step of every uncomputed token of ``seqs`` (blocks reserved): their K/V are written,
    ``num_computed_tokens`` advances and the compute is counted, as :meth:`LLMEngine.step`
    does. Returns the logits of each row's last token, (B, V) float32.

    If the forward raises, the rows' requests are aborted (their blocks freed, none cached:
    their KV may be torn) and the exception propagates, as in :meth:`LLMEngine.step`."""
    reqs = [ExtendRequest(s.block_table, s.num_computed_tokens,
                          s.token_ids[s.num_computed_tokens:]) for s in seqs]
    try:
        logits = engine.runner.extend(reqs)
    except BaseException as exc:
        failed = exc if isinstance(exc, Exception) else \
            RuntimeError(f"the step was interrupted: {exc!r}")
        for seq in seqs:
            seq.error = failed
            engine.abort(seq.request.request_id)
        raise
    engine.counters.steps += 1
    for seq, r in zip(seqs, reqs):
        n = len(r.new_token_ids)
        seq.num_computed_tokens += n
        engine.count_compute(seq.request, r.num_cached, n)
    return torch.cat(logits)  # (B, V)
