"""Gather the per-row parameters of a batch of :class:`SequenceState` into per-row columns.

One pass over the rows in Python; everything after it is vectorised. Greedy rows get the "off"
value of temperature and of every truncation (their argmax is taken after masks and penalties);
mirostat rows get the "off" value of the truncations they replace. ``any_*`` flags let the
pipeline skip a processor that no row uses, and :meth:`BatchParams.column` builds the ``(B,)``
tensor of a parameter only when a stage needs it (the engine calls this every step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from metagen.decoding.state import SequenceState

_INT_COLUMNS = frozenset({"top_k"})


@dataclass(slots=True)
class BatchParams:
    """Per-row parameters of one decoding step, as Python lists of length ``B``.

    Off values: temperature 1 (also for greedy rows), top_k 0, top_p 1, min_p 0, typical_p 1,
    epsilon 0, eta 0, mirostat_mu +inf, repetition 1, presence 0, frequency 0.
    """

    device: torch.device | str
    temperature: list[float]
    top_k: list[int]
    top_p: list[float]
    min_p: list[float]
    typical_p: list[float]
    epsilon: list[float]
    eta: list[float]
    mirostat_mu: list[float]
    repetition: list[float]
    presence: list[float]
    frequency: list[float]
    greedy_rows: list[int]
    mirostat_rows: list[int]

    def column(self, name: str) -> torch.Tensor:
        """The ``(B,)`` tensor of one parameter (int64 for top_k, else float32)."""
        dtype = torch.int64 if name in _INT_COLUMNS else torch.float32
        return torch.tensor(getattr(self, name), dtype=dtype, device=self.device)

    @property
    def any_temperature(self) -> bool:
        return any(t != 1.0 for t in self.temperature)

    @property
    def any_top_k(self) -> bool:
        return any(self.top_k)

    @property
    def any_top_p(self) -> bool:
        return any(v < 1.0 for v in self.top_p)

    @property
    def any_min_p(self) -> bool:
        return any(self.min_p)

    @property
    def any_typical(self) -> bool:
        return any(v < 1.0 for v in self.typical_p)

    @property
    def any_epsilon(self) -> bool:
        return any(self.epsilon)

    @property
    def any_eta(self) -> bool:
        return any(self.eta)

    @property
    def any_repetition(self) -> bool:
        return any(v != 1.0 for v in self.repetition)

    @property
    def any_presence_frequency(self) -> bool:
        return any(self.presence) or any(self.frequency)


def current_mu(seq: SequenceState) -> float:
    """Mirostat's threshold for the next step (``2 * tau`` before the first)."""
    tau = seq.params.mirostat_tau
    assert tau is not None
    return 2.0 * tau if seq.mirostat_mu is None else seq.mirostat_mu


def gather_params(seqs: Sequence[SequenceState], vocab_size: int,
                  device: torch.device | str) -> BatchParams:
    """Read every row's :class:`~metagen.types.SamplingParams` into :class:`BatchParams`."""
    n = len(seqs)
    bp = BatchParams(
        device=device, temperature=[1.0] * n, top_k=[0] * n, top_p=[1.0] * n, min_p=[0.0] * n,
        typical_p=[1.0] * n, epsilon=[0.0] * n, eta=[0.0] * n, mirostat_mu=[math.inf] * n,
        repetition=[1.0] * n, presence=[0.0] * n, frequency=[0.0] * n, greedy_rows=[],
        mirostat_rows=[])
    for b, seq in enumerate(seqs):
        p = seq.params
        bp.repetition[b] = p.repetition_penalty
        bp.presence[b] = p.presence_penalty
        bp.frequency[b] = p.frequency_penalty
        if p.is_greedy:
            bp.greedy_rows.append(b)
            continue
        bp.temperature[b] = p.temperature
        if p.mirostat_tau is not None:
            bp.mirostat_mu[b] = current_mu(seq)
            bp.mirostat_rows.append(b)
            continue
        bp.top_k[b] = p.top_k if 0 < p.top_k < vocab_size else 0
        bp.top_p[b] = p.top_p
        bp.min_p[b] = p.min_p
        bp.typical_p[b] = p.typical_p
        bp.epsilon[b] = p.epsilon_cutoff
        bp.eta[b] = p.eta_cutoff
    return bp
