"""One decoding step for a batch: process, sample with per-row seeds, report logprobs.

Randomness: row ``b`` draws one uniform ``u = uniform_for(rng_seed, sample_index, step)``
(:mod:`metagen.decoding.rng`) and takes the inverse CDF of its processed distribution at ``u``
(cumulative sum in float64, in vocabulary order). So a sample's tokens depend only on its seed,
its sample index and its own logits, never on its position in the batch or on the other rows.

Greedy rows take the argmax of the processed logits (first index on ties). Logprobs are those of
the model's own distribution: ``log_softmax`` of the *raw* logits (vLLM's default), for the
chosen token and for the top-k alternatives. With native row kernels (the engine on CPU), a row
that asks for no top-k gets its chosen token's as ``raw[t] - logsumexp(raw)`` (no ``(B, V)``
log-softmax; equal to rounding), a row that asks for them the value its top-k dict holds. Either
way a row's numbers depend only on that row. A batch whose rows all sample with nothing but a
temperature and ids removed by id (end tokens, bad words) is one native pass per raw row
(``RowKernels.draw_raw``): the same tokens and logprobs bit for bit, with no copy of the logits
(and no tensor operator unless a row lists its top-k). An all-greedy batch with at most ids
removed by id is its raw argmax pass wherever no row's argmax is one of them;
:func:`greedy_step` is that pass for rows a caller has classified once
(:func:`~metagen.decoding.processors.plain_greedy`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch

from metagen.decoding.batch import BatchParams, current_mu, gather_params
from metagen.decoding.processors import (
    PlainGreedy, banned_ids, check_batch, masks_and_temperature_only, process_with,
)
from metagen.decoding.rng import uniforms_for
from metagen.decoding.state import SequenceState, fresh_seed
from metagen.decoding.truncation import mirostat_update
from metagen.errors import NumericalError


class StepOutput:
    """What one :func:`decode_step` produced for a batch of ``B`` rows: ``tokens`` (B,) int64,
    -1 for the rows in ``errors`` (row -> :class:`NumericalError`); ``logprobs`` (B,) float32,
    the log-softmax of the RAW logits at the chosen token; ``top_logprobs``, per row the top-k
    of the raw log-softmax, or None.

    ``tokens`` and ``logprobs`` are held as tensors or as Python lists, whichever the step made
    (an all-greedy step on the native kernels makes lists), and each form is built from the
    other at its first read, then kept: :meth:`token_list` and :meth:`logprob_list` are what the
    engine reads, with no tensor made for them. Read-only after construction."""

    __slots__ = ("_tokens", "_logprobs", "_token_list", "_logprob_list", "top_logprobs",
                 "errors")

    def __init__(self, tokens: torch.Tensor | list[int], logprobs: torch.Tensor | list[float],
                 top_logprobs: list[dict[int, float] | None],
                 errors: dict[int, NumericalError] | None = None) -> None:
        self._tokens = tokens if isinstance(tokens, torch.Tensor) else None
        self._token_list = None if isinstance(tokens, torch.Tensor) else tokens
        self._logprobs = logprobs if isinstance(logprobs, torch.Tensor) else None
        self._logprob_list = None if isinstance(logprobs, torch.Tensor) else logprobs
        self.top_logprobs = top_logprobs
        self.errors: dict[int, NumericalError] = {} if errors is None else errors

    @property
    def tokens(self) -> torch.Tensor:  # (B,) int64
        if self._tokens is None:
            self._tokens = torch.tensor(self._token_list, dtype=torch.int64)
        return self._tokens

    @property
    def logprobs(self) -> torch.Tensor:  # (B,) float32
        if self._logprobs is None:
            self._logprobs = torch.tensor(self._logprob_list, dtype=torch.float32)
        return self._logprobs

    def token_list(self) -> list[int]:
        """:attr:`tokens` as Python ints."""
        if self._token_list is None:
            self._token_list = self.tokens.tolist()
        return self._token_list

    def logprob_list(self) -> list[float]:
        """:attr:`logprobs` as Python floats (float32 values)."""
        if self._logprob_list is None:
            self._logprob_list = self.logprobs.tolist()
        return self._logprob_list


class RowKernels(Protocol):
    """Faster passes over the rows' vocabulary, where a backend has them (the engine's native
    ``sample_rows.c`` on CPU): each row's result must depend only on that row."""

    def draw(self, x: torch.Tensor, uniforms: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens (B,) int64, logsumexp (B,) float64)``: :func:`inverse_cdf_sample` of
        ``exp(x - max)`` at ``uniforms`` ``(B,)``, ``x`` ``(B, V)`` float32 with finite row
        maxima, and each row's ``logsumexp``."""
        ...

    def argmax(self, x: torch.Tensor) -> tuple[list[int], list[float], list[float]]:
        """``(tokens, logsumexp, logprobs)``, ``B`` Python values each: the first index of each
        row's maximum (``torch.argmax``'s on rows with a finite maximum and no NaN), its
        ``logsumexp``, bit for bit :meth:`logsumexp`'s, and the token's log-probability
        ``float32(x[b, t] - logsumexp)``, finite exactly where ``x.amax(dim=-1)`` is."""
        ...

    def logsumexp(self, x: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float64 ``logsumexp`` per row of ``x``, bit for bit :meth:`draw`'s."""
        ...

    def uniforms(self, seeds: Sequence[int], sample_indices: Sequence[int],
                 steps: Sequence[int]) -> np.ndarray:
        """:func:`~metagen.decoding.rng.uniforms_for` (stream 0), bit for bit."""
        ...

    def draw_raw(self, x: torch.Tensor, uniforms: np.ndarray,
                 temperatures: Sequence[float] | None,
                 masked: Sequence[Sequence[int] | None] | None
                 ) -> tuple[list[int], list[float]]:
        """``(tokens, logprobs)``, ``B`` Python values each, from the RAW logits ``x`` ``(B, V)``
        float32 in one pass per row: :meth:`draw`'s token over the row processed by ``masked``
        ids at ``-inf`` then division by ``float32(temperatures[b])``, and the token's raw
        logprob ``float32(x[b, t] - logsumexp(x[b]))`` (:meth:`logsumexp`'s); token -2 where the
        raw row has no finite maximum, -1 where the processed row has none."""
        ...


def log_softmax_rows(logits: torch.Tensor) -> torch.Tensor:
    """``(B, V)`` float32 log-softmax per row (``-inf`` logits give ``-inf``)."""
    return torch.log_softmax(logits.to(torch.float32), dim=-1)


SCAN_BLOCK = 256  # vocabulary entries per block of the two-level inverse-CDF scan


def inverse_cdf_sample(probs: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """``(B,)`` int64: for each row the token ``j`` with ``CDF(j-1) <= u * total < CDF(j)``.

    ``probs`` ``(B, V)`` non-negative weights (need not sum to 1; each row needs one positive
    entry), ``uniforms`` ``(B,)`` in ``[0, 1)``. Sums are float64; a token of probability 0 is
    never returned, also when rounding puts ``u * total`` at the very end of its block.

    Two levels, so no cumulative sum runs over the whole vocabulary (a sequential float64 scan
    of 32000 entries costs ~0.1 ms a row): the CDF of blocks of :data:`SCAN_BLOCK` tokens picks
    the block, then the CDF inside that block picks the token. A block's total is summed in
    another order than its scan, so the two agree to float64 rounding (~1e-16 of the total),
    which is then the most any token's probability can move; a vocabulary of one block is one
    scan.
    """
    b, v = probs.shape
    u = uniforms.to(device=probs.device, dtype=torch.float64)[:, None]  # (B, 1)
    w = min(SCAN_BLOCK, v)
    nb = -(-v // w)
    if nb == 1:  # one block: one scan, whose end is the total
        inner, blk = probs, torch.zeros((b, 1), dtype=torch.long, device=probs.device)
        cdf = inner.cumsum(dim=-1, dtype=torch.float64)
        target = u * cdf[:, -1:]
    else:
        padded = probs if nb * w == v else torch.nn.functional.pad(probs, (0, nb * w - v))
        blocks = padded.view(b, nb, w)
        block_cdf = blocks.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)  # (B, nb)
        target = u * block_cdf[:, -1:]
        blk = torch.searchsorted(block_cdf, target, right=True).clamp_(max=nb - 1)  # (B, 1)
        before = block_cdf.gather(1, (blk - 1).clamp(min=0)).masked_fill(blk == 0, 0.0)
        inner = blocks.gather(1, blk[:, :, None].expand(b, 1, w)).squeeze(1)  # (B, w)
        cdf = inner.cumsum(dim=-1, dtype=torch.float64) + before
    j = torch.searchsorted(cdf, target, right=True).clamp_(max=w - 1)  # (B, 1)
    zero = inner.gather(1, j) <= 0  # only when u * total rounded onto the end of the block
    if bool(zero.any()):
        last = w - 1 - (inner > 0).flip(-1).to(torch.int8).argmax(dim=-1, keepdim=True)
        j = torch.where(zero, last, j)
    return (blk * w + j).squeeze(1)


def top_logprobs_rows(logprobs: torch.Tensor, ks: Sequence[int | None]
                      ) -> list[dict[int, float] | None]:
    """Per row, ``{token id: logprob}`` of the ``ks[b]`` largest entries (``None`` where
    ``ks[b]`` is None), from one ``torch.topk`` over the batch. Tokens of probability 0
    (logprob ``-inf``) are left out, so the dicts are JSON-safe."""
    wanted = [k for k in ks if k]
    out: list[dict[int, float] | None] = [None if k is None else {} for k in ks]
    if not wanted:
        return out
    k_max = min(max(wanted), logprobs.shape[-1])
    vals, idx = torch.topk(logprobs, k_max, dim=-1)
    vals_l, idx_l = vals.tolist(), idx.tolist()
    for b, k in enumerate(ks):
        if k:
            out[b] = {t: v for t, v in zip(idx_l[b][:k], vals_l[b][:k]) if v != float("-inf")}
    return out


@torch.no_grad()
def decode_step(logits: torch.Tensor, seqs: Sequence[SequenceState],
                kernels: RowKernels | None = None) -> StepOutput:
    """One decoding step for a batch (``logits`` ``(B, V)``, ``seqs`` of length ``B``).

    Processes the logits (:func:`~metagen.decoding.processors.process_logits`), samples each row
    with its own counter-based uniform (greedy rows: argmax), and advances ``mirostat_mu`` of the
    mirostat rows that produced a token. Does NOT append the token: the caller does
    ``seq.append(tok)``. A row whose raw logits hold NaN or +inf (or no finite value), or whose
    constraints removed every token, or whose processed logits overflowed, gets token -1, a NaN
    logprob, no top-logprobs and a :class:`NumericalError` in ``errors``; the other rows are
    computed exactly as without it. ``kernels`` (float32 CPU logits only) replaces PyTorch's
    argmax, draw and ``logsumexp``. Raises ``InvalidParameterError`` on a shape mismatch.
    """
    check_batch(logits, seqs)
    n, vocab = logits.shape
    dev = logits.device
    bp = gather_params(seqs, vocab, dev)
    raw = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
    if kernels is not None and (raw.device.type != "cpu" or logits.dtype != torch.float32):
        kernels = None
    if kernels is not None and not bp.greedy_rows and masks_and_temperature_only(seqs, bp):
        return _draw_in_one_pass(raw, seqs, bp, kernels)
    all_greedy = len(bp.greedy_rows) == n
    # All greedy with kernels: one pass over the raw logits gives the bad rows (a non-finite
    # logprob), the argmax, its logprob and the logsumexp: the whole step when nothing applies,
    # or when only ids removed by id apply and no row's argmax is one of them.
    first = kernels.argmax(raw) if kernels is not None and all_greedy else None
    if first is not None and _argmax_stands(first[0], first[2], seqs, bp):
        return StepOutput(first[0], first[2], [None] * n)
    maxima = raw.amax(dim=-1).tolist() if first is None else first[2]  # finite, or a bad row
    bad_l = [not math.isfinite(m) for m in maxima]  # see bad_rows
    bad = torch.tensor(bad_l, device=dev) if any(bad_l) else None
    x = process_with(raw, seqs, bp, bad, copy=False)  # (B, V)
    ks = [None if bad_l[b] else seqs[b].params.logprobs for b in range(n)]
    if first is not None and x is raw and all(k is None for k in ks):  # (so no bad row)
        return StepOutput(first[0], first[2], [None] * n)  # the pass was the step
    dead_l = bad_l if x is raw else [
        b or not math.isfinite(m) for b, m in zip(bad_l, x.amax(dim=-1).tolist())]
    dead = torch.tensor(dead_l, device=dev) if any(dead_l) else None
    if bad is not None:
        raw = raw.masked_fill(bad[:, None], 0.0)

    raw_lse: torch.Tensor | None = None  # (B,) logsumexp of the raw logits
    greedy = set(bp.greedy_rows)
    sample_rows = [b for b in range(n) if b not in greedy]
    if all_greedy:  # no row gather, which on the CPU starts an OpenMP region for one row
        if first is None:  # (its workers then spin)
            tokens = x.argmax(dim=-1)
        else:
            tokens = (torch.tensor(first[0], dtype=torch.int64) if x is raw
                      else _argmax(x, kernels))
            raw_lse = torch.tensor(first[1], dtype=torch.float64)  # a dead row's: meaningless
    else:
        tokens = torch.zeros(n, dtype=torch.int64, device=dev)
    if bp.greedy_rows and sample_rows:
        g = torch.tensor(bp.greedy_rows, device=dev)
        tokens[g] = _argmax(x[g], kernels)
    if sample_rows:
        tokens, lse = _sample(x, seqs, sample_rows, dead, tokens, kernels)
        if lse is not None and x is raw and len(sample_rows) == n:
            raw_lse = lse  # the draw's own: bit for bit kernels.logsumexp(raw)
        if bp.mirostat_rows:
            _advance_mirostat(x, seqs, bp.mirostat_rows, dead_l, tokens)
    ks = [None if dead_l[b] else k for b, k in enumerate(ks)]
    chosen = _chosen_logprobs(raw, tokens, ks, kernels, raw_lse)  # a dead row's token: any
    errors: dict[int, NumericalError] = {}
    if dead is not None:
        tokens = tokens.masked_fill(dead, -1)
        chosen = chosen.masked_fill(dead, float("nan"))
        errors = {b: NumericalError(_why(b, bad_l[b], seqs[b]), row=b)
                  for b in range(n) if dead_l[b]}
    wanted = any(k is not None for k in ks)
    top = top_logprobs_rows(log_softmax_rows(raw) if wanted else raw, ks)  # raw: not read
    return StepOutput(tokens=tokens, logprobs=chosen, top_logprobs=top, errors=errors)


def greedy_step(logits: torch.Tensor, seqs: Sequence[SequenceState],
                plans: Sequence[PlainGreedy | None], kernels: RowKernels
                ) -> tuple[list[int], list[float]] | None:
    """``(tokens, logprobs)``, ``B`` Python values each: :func:`decode_step`'s, bit for bit, for
    a batch whose rows are all plain greedy rows (``plans[b]`` is
    :func:`~metagen.decoding.processors.plain_greedy` of ``seqs[b]``, decided once by the
    caller), from one kernel pass over the raw logits ``(B, V)``: each row's argmax and its raw
    logprob. None where that pass is not the step: a row that is not plain greedy (its plan
    None), logits that are not ``(len(seqs), V)`` float32 on the CPU, a bad row (NaN, +inf, no
    finite value), or a row whose argmax is an id its processing removes now; the caller then
    runs :func:`decode_step`, which gives the errors. Reads ``logits`` only; appends nothing."""
    if None in plans or logits.dtype != torch.float32 or logits.device.type != "cpu" or (
            logits.dim() != 2 or logits.shape[0] != len(seqs) or not logits.shape[1]):
        return None
    tokens, _, lps = kernels.argmax(logits)
    for t, lp, plan, seq in zip(tokens, lps, plans, seqs):
        if plan is None or not math.isfinite(lp) or plan.removes(t, len(seq.output_ids)):
            return None
    return tokens, lps


def _argmax_stands(tokens: list[int], lps: list[float], seqs: Sequence[SequenceState],
                   bp: BatchParams) -> bool:
    """For an all-greedy batch whose raw argmax pass gave ``tokens`` and their logprobs
    ``lps``: True when that pass is the step, i.e. no row is bad or lists its top-k, the rows
    are processed by at most ids removed by id, and no row's argmax is one of its removed ids
    (the masked row's first maximum is then the raw row's: masking only lowers entries). No
    ``(B, V)`` copy of the logits is made for the masks then."""
    if (not all(math.isfinite(lp) for lp in lps) or any(s.params.logprobs is not None for s in seqs)
            or not masks_and_temperature_only(seqs, bp)):
        return False
    return not any(ids and t in ids for t, ids in zip(tokens, banned_ids(seqs)))


def _draw_in_one_pass(raw: torch.Tensor, seqs: Sequence[SequenceState], bp: BatchParams,
                      kernels: RowKernels) -> StepOutput:
    """The step of a batch whose rows all sample, with masked ids and a temperature at most
    (:func:`~metagen.decoding.processors.masks_and_temperature_only`): one kernel pass per row
    of the raw logits ``(B, V)`` gives the bad and dead rows, the draw and the raw logprob, the
    values of the general path bit for bit, with no copy of the logits. Rows that list their
    top-k then get it, and their token's logprob, from the raw log-softmax as there."""
    n = len(seqs)
    banned = banned_ids(seqs)
    tokens, lps = kernels.draw_raw(raw, _uniforms(seqs, range(n), kernels),
                                   bp.temperature if bp.any_temperature else None,
                                   banned if any(banned) else None)
    errors = {b: NumericalError(_why(b, t == -2, seqs[b]), row=b)
              for b, t in enumerate(tokens) if t < 0}
    for b in errors:
        tokens[b] = -1
    top: list[dict[int, float] | None] = [None] * n
    ks = [None if b in errors else s.params.logprobs for b, s in enumerate(seqs)]
    listed = [b for b, k in enumerate(ks) if k is not None]
    if listed:  # as _chosen_logprobs and top_logprobs_rows on the general path
        rows = torch.tensor(listed)
        idx = torch.tensor([tokens[b] for b in listed])[:, None]
        for b, lp in zip(listed, log_softmax_rows(raw[rows]).gather(1, idx).squeeze(1).tolist()):
            lps[b] = lp
        top = top_logprobs_rows(log_softmax_rows(raw), ks)
    return StepOutput(tokens, lps, top, errors)


def _uniforms(seqs: Sequence[SequenceState], rows: Sequence[int], kernels: RowKernels | None
              ) -> np.ndarray:
    """``(len(rows),)`` float64: each row's uniform for this step (the kernels' hash where there
    are kernels: the same values); a row whose seed was cleared after construction draws one and
    keeps it."""
    for b in rows:
        if seqs[b].rng_seed is None:
            seqs[b].rng_seed = fresh_seed()
    seeds = [seqs[b].rng_seed for b in rows]
    indices, steps = [seqs[b].sample_index for b in rows], [seqs[b].step for b in rows]
    if kernels is None:
        return uniforms_for(seeds, indices, steps)  # type: ignore[arg-type]
    return kernels.uniforms(seeds, indices, steps)  # type: ignore[arg-type]


def _argmax(x: torch.Tensor, kernels: RowKernels | None) -> torch.Tensor:
    """``(B,)`` int64 first index of each row's maximum of ``x`` ``(B, V)``."""
    if kernels is None:
        return x.argmax(dim=-1)
    return torch.tensor(kernels.argmax(x)[0], dtype=torch.int64, device=x.device)


def _chosen_logprobs(raw: torch.Tensor, tokens: torch.Tensor, ks: list[int | None],
                     kernels: RowKernels | None, raw_lse: torch.Tensor | None) -> torch.Tensor:
    """``(B,)`` float32 raw logprob of each row's token (``tokens`` ``(B,)``, each in the
    vocabulary): ``log_softmax`` without ``kernels``; with them ``raw[t] - logsumexp(raw)``
    (``raw_lse`` where the draw computed it), except for rows that list their top-k (``ks[b]``
    not None), which get ``log_softmax``'s value, the one their top-k dict holds."""
    idx = tokens[:, None]
    if kernels is None:
        return log_softmax_rows(raw).gather(1, idx).squeeze(1)
    lse = kernels.logsumexp(raw) if raw_lse is None else raw_lse
    chosen = (raw.gather(1, idx).squeeze(1).to(lse.dtype) - lse).to(torch.float32)
    listed = [b for b, k in enumerate(ks) if k is not None]
    if listed:
        rows = torch.tensor(listed, device=raw.device)
        chosen[rows] = log_softmax_rows(raw[rows]).gather(1, idx[rows]).squeeze(1)
    return chosen


def _sample(x: torch.Tensor, seqs: Sequence[SequenceState], rows: list[int],
            dead: torch.Tensor | None, tokens: torch.Tensor, kernels: RowKernels | None
            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Inverse-CDF draws for ``rows`` of the processed logits ``x``, one uniform per row; with
    ``kernels``, also the ``(len(rows),)`` logsumexp of those rows of ``x``. ``dead`` ``(B,)``
    bool: the rows whose weights are invalid (None: none)."""
    u = _uniforms(seqs, rows, kernels)
    if len(rows) == x.shape[0]:
        xs, gone = x, dead
    else:
        idx = torch.tensor(rows, device=x.device)
        xs, gone = x[idx], None if dead is None else dead[idx]
    if gone is not None and bool(gone.any()):
        xs = xs.masked_fill(gone[:, None], 0.0)  # dead rows: any valid weights, result dropped
    lse = None
    if kernels is not None:
        drawn, lse = kernels.draw(xs, u)
    else:
        weights = torch.exp(xs - xs.amax(dim=-1, keepdim=True))  # (S, V), max 1
        drawn = inverse_cdf_sample(weights, torch.from_numpy(u))
    if len(rows) == x.shape[0]:
        return drawn, lse
    tokens[idx] = drawn
    return tokens, lse


def _advance_mirostat(x: torch.Tensor, seqs: Sequence[SequenceState], rows: list[int],
                      dead: list[bool], tokens: torch.Tensor) -> None:
    idx = torch.tensor(rows, device=x.device)
    surprise = -torch.log_softmax(x[idx], dim=-1).gather(1, tokens[idx][:, None]).squeeze(1)
    surprise_l = surprise.tolist()
    for j, b in enumerate(rows):
        if not dead[b]:
            seq = seqs[b]
            p = seq.params
            seq.mirostat_mu = mirostat_update(current_mu(seq), p.mirostat_tau,  # type: ignore
                                              p.mirostat_eta, surprise_l[j])


def _why(row: int, bad: bool, seq: SequenceState) -> str:
    if bad:
        return (f"row {row}: logits contain NaN or +inf (or no finite value); "
                "the model or a custom logits processor produced invalid numbers")
    return (f"row {row}: no token can be sampled after processing (every token removed by "
            f"allowed_token_ids / bad_words / min_tokens / ignore_eos, or logits overflowed at "
            f"temperature={seq.params.temperature})")
