"""Gather the per-row parameters of a batch of :class:`SequenceState` into ``(B,)`` tensors.

One pass over the rows in Python; everything after it is vectorised. Greedy rows get the "off"
value of temperature and of every truncation (their argmax is taken after masks and penalties);
mirostat rows get the "off" value of the truncations they replace. ``any_*`` flags let the
pipeline skip a processor that no row uses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from metagen.decoding.state import SequenceState


@dataclass(slots=True)
class BatchParams:
    """Per-row parameters of one decoding step (all tensors ``(B,)`` on the logits' device)."""

    greedy: torch.Tensor          # bool
    temperature: torch.Tensor     # float32, 1 for greedy rows
    top_k: torch.Tensor           # int64, 0 = off
    top_p: torch.Tensor           # float32, 1 = off
    min_p: torch.Tensor           # float32, 0 = off
    typical_p: torch.Tensor       # float32, 1 = off
    epsilon: torch.Tensor         # float32, 0 = off
    eta: torch.Tensor             # float32, 0 = off
    mirostat_mu: torch.Tensor     # float32, +inf = off
    repetition: torch.Tensor      # float32, 1 = off
    presence: torch.Tensor        # float32, 0 = off
    frequency: torch.Tensor       # float32, 0 = off
    greedy_rows: list[int]
    mirostat_rows: list[int]
    any_temperature: bool
    any_top_k: bool
    any_top_p: bool
    any_min_p: bool
    any_typical: bool
    any_epsilon: bool
    any_eta: bool
    any_repetition: bool
    any_presence_frequency: bool


def current_mu(seq: SequenceState) -> float:
    """Mirostat's threshold for the next step (``2 * tau`` before the first)."""
    tau = seq.params.mirostat_tau
    assert tau is not None
    return 2.0 * tau if seq.mirostat_mu is None else seq.mirostat_mu


def gather_params(seqs: Sequence[SequenceState], vocab_size: int,
                  device: torch.device | str) -> BatchParams:
    """Read every row's :class:`~metagen.types.SamplingParams` into :class:`BatchParams`."""
    n = len(seqs)
    greedy = [False] * n
    temp = [1.0] * n
    top_k = [0] * n
    top_p = [1.0] * n
    min_p = [0.0] * n
    typical = [1.0] * n
    eps = [0.0] * n
    eta = [0.0] * n
    mu = [math.inf] * n
    rep = [1.0] * n
    pres = [0.0] * n
    freq = [0.0] * n
    greedy_rows: list[int] = []
    miro_rows: list[int] = []
    for b, seq in enumerate(seqs):
        p = seq.params
        rep[b] = p.repetition_penalty
        pres[b] = p.presence_penalty
        freq[b] = p.frequency_penalty
        if p.is_greedy:
            greedy[b] = True
            greedy_rows.append(b)
            continue
        temp[b] = p.temperature
        if p.mirostat_tau is not None:
            mu[b] = current_mu(seq)
            miro_rows.append(b)
            continue
        top_k[b] = p.top_k if 0 < p.top_k < vocab_size else 0
        top_p[b] = p.top_p
        min_p[b] = p.min_p
        typical[b] = p.typical_p
        eps[b] = p.epsilon_cutoff
        eta[b] = p.eta_cutoff

    def f32(values: list[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.float32, device=device)

    return BatchParams(
        greedy=torch.tensor(greedy, dtype=torch.bool, device=device),
        temperature=f32(temp), top_k=torch.tensor(top_k, dtype=torch.int64, device=device),
        top_p=f32(top_p), min_p=f32(min_p), typical_p=f32(typical), epsilon=f32(eps),
        eta=f32(eta), mirostat_mu=f32(mu), repetition=f32(rep), presence=f32(pres),
        frequency=f32(freq), greedy_rows=greedy_rows, mirostat_rows=miro_rows,
        any_temperature=any(t != 1.0 for t in temp), any_top_k=any(top_k),
        any_top_p=any(v < 1.0 for v in top_p), any_min_p=any(v > 0 for v in min_p),
        any_typical=any(v < 1.0 for v in typical), any_epsilon=any(v > 0 for v in eps),
        any_eta=any(v > 0 for v in eta), any_repetition=any(v != 1.0 for v in rep),
        any_presence_frequency=any(pres) or any(freq))
