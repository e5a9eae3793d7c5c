"""Several sequences over one prompt on llama.cpp's low-level API: best-of-N and beam search.

``llama_cpp.Llama`` drives one sequence. Both workloads here use a context of ``n_seq_max``
sequences in one unified KV cache (``kv_unified``: a cell may belong to several sequences, so
``llama_memory_seq_cp`` shares the prompt's cells instead of copying them): the prompt is
prefilled once as sequence 0 and every later step decodes one token per sequence in one batch.

- :func:`best_of_n`: ``n`` samples at temperature 1 (llama.cpp's ``dist`` sampler alone: no
  top-k/top-p/min-p), seeded by ``seed``, each exactly ``max_new`` tokens (EOS is an ordinary
  token).
- :func:`beam`: llama.cpp has had no beam search since ``llama_beam_search`` was removed (2024),
  so the bookkeeping is ours, written to match transformers' ``num_beams`` search with length
  penalty 1.0 and no early stopping: per step the ``width`` best of ``width x vocab`` candidates
  by summed fp32 log-probabilities, every beam exactly ``max_new`` tokens (EOS never ends a beam
  here; transformers would set an EOS hypothesis aside, which random-weight models practically
  never rank in the top ``2 width``). Beams live in two alternating sets of sequence ids: a step
  copies each new beam's parent into the other set and drops the old set.
"""

from __future__ import annotations

from typing import Any

import llama_cpp
import numpy as np
from llama_cpp import _internals as internals


def context(model: Any, n_ctx: int, n_seq: int, n_batch: int, threads: int,
            flash_attn: bool, kv_type: int) -> Any:
    """A context on ``model`` (an ``internals.LlamaModel``) for ``n_seq`` sequences sharing a
    unified KV cache of ``n_ctx`` cells of ggml type ``kv_type``."""
    p = llama_cpp.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = n_ctx, n_batch, n_batch, n_seq
    p.n_threads = p.n_threads_batch = threads
    p.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn
                         else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    p.type_k = p.type_v = kv_type
    p.kv_unified = True
    p.no_perf = True
    return internals.LlamaContext(model=model, params=p, verbose=False)


def fill(batch: Any, tokens: list[int], pos: list[int], seqs: list[int],
         logits: list[bool]) -> None:
    """Put one token per entry into ``batch`` (an ``internals.LlamaBatch``)."""
    b = batch.batch
    b.n_tokens = len(tokens)
    for j, (t, p, s, lg) in enumerate(zip(tokens, pos, seqs, logits)):
        b.token[j], b.pos[j], b.n_seq_id[j], b.logits[j] = t, p, 1, lg
        b.seq_id[j][0] = s


def prefill(ctx: Any, batch: Any, prompt: list[int]) -> None:
    """Clear the cache and decode ``prompt`` as sequence 0, logits for its last token only."""
    ctx.kv_cache_clear()
    n = len(prompt)
    fill(batch, prompt, list(range(n)), [0] * n, [False] * (n - 1) + [True])
    ctx.decode(batch)


def logits_rows(ctx: Any, rows: int, vocab: int) -> np.ndarray:
    """The last decode's output logits, ``(rows, vocab)`` fp32 (a copy)."""
    ptr = llama_cpp.llama_get_logits(ctx.ctx)
    return np.ctypeslib.as_array(ptr, shape=(rows * vocab,)).reshape(rows, vocab).copy()


def best_of_n(ctx: Any, batch: Any, prompt: list[int], n: int, max_new: int,
              seed: int) -> list[list[int]]:
    """``n`` seeded temperature-1 samples of exactly ``max_new`` tokens; prompt prefilled once."""
    prefill(ctx, batch, prompt)
    for s in range(1, n):
        ctx.kv_cache_seq_cp(0, s, -1, -1)  # share the prompt's cells
    sampler = internals.LlamaSampler()
    sampler.add_dist(seed)  # softmax of the raw logits (temperature 1), one draw
    try:
        last = [sampler.sample(ctx, -1) for _ in range(n)]
        outs = [[t] for t in last]
        P = len(prompt)
        for step in range(1, max_new):
            fill(batch, last, [P + step - 1] * n, list(range(n)), [True] * n)
            ctx.decode(batch)
            last = [sampler.sample(ctx, i) for i in range(n)]
            for o, t in zip(outs, last):
                o.append(t)
    finally:
        sampler.close()
    return outs


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax in fp32, ``(B, V)``."""
    m = x.max(axis=-1, keepdims=True)
    z = x - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Flat indices of the ``k`` largest entries of ``scores``, best first (ties: lower index)."""
    flat = scores.reshape(-1)
    part = np.argpartition(-flat, k - 1)[:k]
    return part[np.lexsort((part, -flat[part]))]


def beam(ctx: Any, batch: Any, prompt: list[int], width: int, max_new: int,
         vocab: int) -> list[int]:
    """The best of ``width`` beams after exactly ``max_new`` tokens (summed log-probs; all beams
    have the same length, so length penalty 1.0 does not reorder them)."""
    prefill(ctx, batch, prompt)
    P = len(prompt)
    logp = log_softmax(logits_rows(ctx, 1, vocab))  # (1, V)
    pick = top(logp, width)
    parents, tokens = pick // vocab, pick % vocab
    scores = logp.reshape(-1)[pick]  # (W,)
    hist = [[int(t)] for t in tokens]
    cur = [0]  # sequence id of each live beam (only the prompt at first)
    sets = (list(range(width)), list(range(width, 2 * width)))
    for step in range(1, max_new):
        new = sets[step % 2]
        old = sets[(step + 1) % 2]
        for b, p in enumerate(parents):
            ctx.kv_cache_seq_cp(cur[p], new[b], -1, -1)
        for s in old:
            ctx.kv_cache_seq_rm(s, -1, -1)
        fill(batch, [int(t) for t in tokens], [P + step - 1] * width, new, [True] * width)
        ctx.decode(batch)
        cand = scores[:, None] + log_softmax(logits_rows(ctx, width, vocab))  # (W, V)
        pick = top(cand, width)
        parents, tokens = pick // vocab, pick % vocab
        scores = cand.reshape(-1)[pick]
        hist = [hist[p] + [int(t)] for p, t in zip(parents, tokens)]
        cur = new
    return hist[int(np.argmax(scores))]
