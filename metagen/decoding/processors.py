"""The composed logits pipeline: raw ``(B, V)`` logits -> processed logits, per-row parameters.

Order (each stage sees the previous stage's output; removed tokens are ``-inf``):

1. hard constraints and biases: ``logit_bias`` (added) -> ``allowed_token_ids`` (everything else
   removed) -> token healing (rows still re-producing the text removed from their prompt keep
   only the tokens that extend it, :mod:`metagen.decoding.healing`) -> the output constraint
   (``regex`` / ``json_schema`` / ``grammar`` / ``choice``: what the language forbids next
   removed, :mod:`metagen.decoding.constraint_mask`) -> ``bad_words`` (as text,
   :mod:`metagen.decoding.bad_text`; and any id-level ``bad_words_ids``) ->
   ``no_repeat_ngram_size`` -> end-token suppression (``min_tokens``: EOS and
   ``stop_token_ids`` while the output is shorter; ``ignore_eos``: EOS always);
2. penalties: repetition (prompt + output) -> presence and frequency (output);
3. temperature;
4. truncation: top-k -> top-p -> min-p -> typical -> epsilon -> eta; for rows with
   ``mirostat_tau`` set, Mirostat v2's surprise threshold instead of all six.

Greedy rows (temperature < 1e-5) stop after stage 2: their token is the argmax of the masked and
penalised logits, with no temperature division and no truncation (typical sampling may drop the
argmax, so applying it would change greedy decoding).

Rows whose raw logits contain NaN or +inf, or no finite value, are "bad": the other rows are
processed normally, bad rows come out as all-NaN (:func:`bad_rows` finds them first;
:func:`~metagen.decoding.sampler.decode_step` turns them into per-row ``NumericalError``).
Stages no row uses are skipped, so a batch of plain temperature sampling costs one division.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from metagen.decoding.batch import BatchParams, gather_params
from metagen.decoding.constraint_mask import apply_constraints
from metagen.decoding.masks import (
    apply_bias, banned_by_bad_words, banned_by_ngram, bias_matrix, keep_only, mask_ids,
    rows_to_mask, suppressed_end_tokens,
)
from metagen.decoding.penalties import (
    apply_presence_frequency, apply_repetition_penalty, token_counts,
)
from metagen.decoding.state import SequenceState
from metagen.decoding.truncation import (
    apply_temperature, epsilon_filter, eta_filter, min_p_filter, mirostat_filter, top_k_filter,
    top_p_filter, typical_filter,
)
from metagen.errors import InvalidParameterError


def check_batch(logits: torch.Tensor, seqs: Sequence[SequenceState]) -> None:
    """Raise :class:`InvalidParameterError` unless ``logits`` is ``(len(seqs), V)`` floating."""
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise InvalidParameterError("logits", shape, "must be a (B, V) tensor")
    if logits.shape[0] != len(seqs):
        raise InvalidParameterError(
            "logits", tuple(logits.shape), f"has {logits.shape[0]} rows for {len(seqs)} sequences")
    if not logits.is_floating_point():
        raise InvalidParameterError("logits", logits.dtype, "must be a floating-point tensor")
    if logits.shape[1] == 0:
        raise InvalidParameterError("logits", tuple(logits.shape), "vocabulary is empty")


def bad_rows(logits: torch.Tensor) -> torch.Tensor:
    """``(B,)`` bool: rows with a NaN or +inf logit, or with no finite logit at all.

    One reduction: the row maximum is NaN (max propagates NaN), +inf, or -inf exactly then.
    """
    return ~torch.isfinite(logits.amax(dim=-1))


def apply_healing(x: torch.Tensor, seqs: Sequence[SequenceState]) -> torch.Tensor:
    """``x`` (``(B, V)``: logits or log-probabilities) with ``-inf`` wherever a row still
    re-producing its healed prompt text may not go (:class:`~metagen.decoding.healing.Healing`);
    ``x`` itself when no row is healing."""
    if all(s.heal is None for s in seqs):
        return x
    healing = [None if s.heal is None else s.heal.allowed(s.output_ids) for s in seqs]
    if all(h is None for h in healing):
        return x
    active = torch.tensor([h is not None for h in healing], dtype=torch.bool, device=x.device)
    return keep_only(x, rows_to_mask(healing, x.shape[1], x.device), active)


def _constraints(x: torch.Tensor, seqs: Sequence[SequenceState]) -> torch.Tensor:
    vocab, dev = x.shape[1], x.device
    biases = [s.params.logit_bias for s in seqs]
    if any(biases):
        x = apply_bias(x, bias_matrix(biases, vocab, dev))
    allowed = [s.params.allowed_token_ids for s in seqs]
    if any(a is not None for a in allowed):
        active = torch.tensor([a is not None for a in allowed], dtype=torch.bool, device=dev)
        x = keep_only(x, rows_to_mask(allowed, vocab, dev), active)
    x = apply_healing(x, seqs)
    if any(s.constraint is not None for s in seqs):
        x = apply_constraints(x, seqs)
    return x


def banned_ids(seqs: Sequence[SequenceState]) -> list[list[int] | None]:
    """Per row, the ids stage 1 removes by id (``bad_words``, ``no_repeat_ngram_size``,
    end-token suppression), or None where it removes none."""
    banned: list[list[int] | None] = []
    for s in seqs:
        p = s.params
        row: list[int] = []
        if s.bad_words_ids or p.no_repeat_ngram_size:
            context = s.prompt_ids + s.output_ids
            if s.bad_words_ids:
                row += banned_by_bad_words(context, s.bad_words_ids)
            if p.no_repeat_ngram_size:
                row += banned_by_ngram(context, p.no_repeat_ngram_size)
        if p.ignore_eos or p.min_tokens:
            row += suppressed_end_tokens(len(s.output_ids), p.min_tokens, p.ignore_eos,
                                         s.eos_token_ids, p.stop_token_ids)
        if s.bad_text is not None:
            row += s.bad_text.banned(s.output_ids)
        banned.append(row or None)
    return banned


def masks_and_temperature_only(seqs: Sequence[SequenceState], bp: BatchParams) -> bool:
    """True when, for these rows, the pipeline is at most :func:`banned_ids`' ids at ``-inf``
    then the temperature division: no bias, allowed ids, healing, output constraint, penalty,
    truncation or Mirostat on any row (so a kernel may apply the two while it reads the raw
    logits, with the same result)."""
    if (bp.any_repetition or bp.any_presence_frequency or bp.mirostat_rows or bp.any_top_k
            or bp.any_top_p or bp.any_min_p or bp.any_typical or bp.any_epsilon or bp.any_eta):
        return False
    return all(not s.params.logit_bias and s.params.allowed_token_ids is None and s.heal is None
               and s.constraint is None for s in seqs)


@dataclass(frozen=True, slots=True)
class PlainGreedy:
    """What the pipeline does to a greedy row that :func:`plain_greedy` accepted: at most its
    end tokens removed by id (:func:`banned_ids`' end-token part), on every step. ``always``:
    the ids removed at every step (EOS under ``ignore_eos``); ``early``: the ids removed while
    fewer than ``min_tokens`` tokens have been generated (EOS and ``stop_token_ids``)."""

    always: frozenset[int]
    early: frozenset[int]
    min_tokens: int

    def removes(self, token: int, step: int) -> bool:
        """True when the row's processing at ``step`` (tokens generated so far) sets ``token``
        to ``-inf``."""
        return token in self.always or (step < self.min_tokens and token in self.early)


def plain_greedy(seq: SequenceState) -> PlainGreedy | None:
    """The row's :class:`PlainGreedy` when it decodes greedily, lists no top-k (``logprobs``
    None) and no processor but end-token suppression can ever apply to it (no penalty, bias,
    allowed ids, healing, output constraint, bad words or n-gram ban); None otherwise. Depends
    only on fields a backend sets when it creates the state, so a backend may decide it once
    per sequence (the engine does, in ``_new_seq``) as long as it leaves those fields alone."""
    p = seq.params
    if (not p.is_greedy or p.logprobs is not None or p.repetition_penalty != 1.0
            or p.presence_penalty or p.frequency_penalty or p.logit_bias
            or p.allowed_token_ids is not None or seq.heal is not None
            or seq.constraint is not None or seq.bad_words_ids or seq.bad_text is not None
            or p.no_repeat_ngram_size):
        return None
    eos = frozenset(seq.eos_token_ids)
    return PlainGreedy(eos if p.ignore_eos else frozenset(),
                       eos | frozenset(p.stop_token_ids) if p.min_tokens else frozenset(),
                       p.min_tokens)


def _penalties(x: torch.Tensor, seqs: Sequence[SequenceState], bp: BatchParams) -> torch.Tensor:
    vocab, dev = x.shape[1], x.device
    if bp.any_repetition:
        contexts = [s.prompt_ids + s.output_ids if s.params.repetition_penalty != 1.0 else None
                    for s in seqs]
        seen = rows_to_mask(contexts, vocab, dev)
        x = apply_repetition_penalty(x, seen, bp.column("repetition"))
    if bp.any_presence_frequency:
        outputs = [s.output_ids if (s.params.presence_penalty or s.params.frequency_penalty)
                   else None for s in seqs]
        x = apply_presence_frequency(x, token_counts(outputs, vocab, dev), bp.column("presence"),
                                     bp.column("frequency"))
    return x


def _truncate(x: torch.Tensor, bp: BatchParams) -> torch.Tensor:
    if bp.any_top_k:
        x = top_k_filter(x, bp.column("top_k"))
    if bp.any_top_p:
        x = top_p_filter(x, bp.column("top_p"))
    if bp.any_min_p:
        x = min_p_filter(x, bp.column("min_p"))
    if bp.any_typical:
        x = typical_filter(x, bp.column("typical_p"))
    if bp.any_epsilon:
        x = epsilon_filter(x, bp.column("epsilon"))
    if bp.any_eta:
        x = eta_filter(x, bp.column("eta"))
    if bp.mirostat_rows:
        x = mirostat_filter(x, bp.column("mirostat_mu"))
    return x


def process_with(logits: torch.Tensor, seqs: Sequence[SequenceState], bp: BatchParams,
                 bad: torch.Tensor | None, copy: bool = True) -> torch.Tensor:
    """:func:`process_logits` with the gathered parameters and bad rows (``(B,)`` bool; None:
    none) already computed. With ``copy=False`` the result may be ``logits`` itself when no
    stage applies."""
    x = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
    if bad is not None and not bool(bad.any()):
        bad = None
    if bad is not None:
        x = x.masked_fill(bad[:, None], 0.0)
    x = _constraints(x, seqs)
    x = _penalties(x, seqs, bp)
    sampled = len(bp.greedy_rows) < len(seqs)  # greedy rows stop after the penalties
    if sampled and bp.any_temperature:
        x = apply_temperature(x, bp.column("temperature"))
    # The ids stage 1 removes by id: set here, equal to setting them first (penalties and the
    # temperature keep -inf at -inf and touch no other entry for them), so in place on the
    # pipeline's own copy where an earlier stage made one, instead of copying the (B, V) logits.
    banned = banned_ids(seqs)
    if any(banned):
        x = mask_ids(x, banned, in_place=x is not logits)
    if sampled:
        x = _truncate(x, bp)
    if bad is not None:
        x = x.masked_fill(bad[:, None], float("nan"))
    if copy and x is logits:  # nothing applied: never hand back the caller's tensor
        x = x.clone()
    return x


@torch.no_grad()
def process_logits(logits: torch.Tensor, seqs: Sequence[SequenceState]) -> torch.Tensor:
    """``(B, V)`` raw logits -> ``(B, V)`` processed float32 logits (``-inf`` = removed).

    All processors in the order of the module docstring, with each row's own parameters.
    Does not mutate ``seqs`` or ``logits`` (Mirostat reads its current threshold; only
    :func:`~metagen.decoding.sampler.decode_step` advances it). Bad rows (NaN / +inf / no finite
    logit) come out all-NaN. Raises :class:`InvalidParameterError` on a shape mismatch.
    """
    check_batch(logits, seqs)
    bp = gather_params(seqs, logits.shape[1], logits.device)
    return process_with(logits, seqs, bp, bad_rows(logits))


@torch.no_grad()
def greedy_tokens(logits: torch.Tensor, seqs: Sequence[SequenceState]
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B,)`` int64 argmax of the processed logits and ``(B,)`` bool dead rows, for rows that
    all decode greedily: the token on which :func:`probs_for_sampling` puts each row's one-hot
    and the rows it makes all-NaN, without building the ``(B, V)`` distributions."""
    check_batch(logits, seqs)
    bp = gather_params(seqs, logits.shape[1], logits.device)
    x = process_with(logits, seqs, bp, bad_rows(logits), copy=False)
    tokens, best = argmax_rows(x)
    return tokens, ~(best > float("-inf"))


def argmax_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B,)`` int64 index of each row's maximum of ``x`` (B, V), the first one on ties (NaN
    counts as the maximum), as ``torch.argmax``; and ``(B,)`` the values there. On the CPU
    through NumPy, whose argmax has the same rule: one pass and no OpenMP region (a
    32000-token row: ~8 us against ~100 us for ``torch.argmax`` at one thread on a 2-core
    Xeon)."""
    if x.device.type != "cpu":
        tokens = x.argmax(dim=-1)
        return tokens, x.gather(1, tokens[:, None])[:, 0]
    a = x.detach().numpy()
    idx = a.argmax(axis=-1)
    return torch.from_numpy(idx.astype(np.int64)), torch.from_numpy(a[np.arange(a.shape[0]), idx])


@torch.no_grad()
def probs_for_sampling(logits: torch.Tensor, seqs: Sequence[SequenceState]) -> torch.Tensor:
    """``(B, V)`` float32: the distribution each row's next token is drawn from.

    ``softmax(process_logits(...))`` for sampled rows; a one-hot at the argmax for greedy rows
    (the degenerate distribution greedy decoding draws from, as speculative decoding needs);
    all-NaN for bad rows and for rows whose constraints removed every token.
    """
    check_batch(logits, seqs)
    bp = gather_params(seqs, logits.shape[1], logits.device)
    x = process_with(logits, seqs, bp, bad_rows(logits))
    probs = torch.softmax(x, dim=-1)
    if bp.greedy_rows:
        rows = torch.tensor(bp.greedy_rows, device=x.device)
        g = x[rows]
        one_hot = torch.zeros_like(g).scatter_(1, g.argmax(dim=-1, keepdim=True), 1.0)
        dead = ~(g.amax(dim=-1) > float("-inf"))  # NaN or all -inf
        probs[rows] = one_hot.masked_fill(dead[:, None], float("nan"))
    return probs
