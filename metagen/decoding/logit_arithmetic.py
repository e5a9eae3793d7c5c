"""Logit arithmetic between models sharing a vocabulary: pure functions over ``(B, V)`` logits.

Each function takes the raw next-token logits of the same rows under two or three models and
returns the ``(B, V)`` scores the sampler then treats as logits (temperature, truncation,
penalties and greedy argmax apply to them as to any model's logits):

- contrastive decoding (Li et al. 2023): among the *plausible* tokens, those whose expert
  probability is at least ``alpha`` times the expert's most likely token's, the score is
  ``log p_expert - log p_amateur``; every other token gets ``-inf``. The amateur's distribution
  is taken at temperature ``tau`` (``amateur_temperature``): ``p_amateur = softmax(z_amateur /
  tau)``, the paper's tau 0.5 for a small amateur sharpening it. With ``beta`` it is the improved
  form of O'Brien & Lewis 2023, ``(1 + beta) * z_expert - beta * z_amateur / tau`` on the raw
  logits, under the same cut.
- DExperts (Liu et al. 2021): ``z_base + alpha * (z_expert - z_antiexpert)``.
- proxy tuning (Liu et al. 2024): ``z_base + (z_tuned - z_untuned)``, the small tuned and
  untuned models steering the large base.

Parameters are checked (``InvalidParameterError`` naming the parameter) by :func:`check_alpha`,
:func:`check_beta`, :func:`check_amateur_temperature` and :func:`check_weight`, which the
generator calls once at construction.
"""

from __future__ import annotations

import math

import torch

from metagen.decoding.sampler import log_softmax_rows
from metagen.decoding.truncation import NEG_INF, min_p_filter
from metagen.errors import InvalidParameterError


def check_alpha(alpha: float) -> float:
    """The plausibility cut: a number in [0, 1] (0 keeps every token the expert allows)."""
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
            not 0.0 <= alpha <= 1.0:
        raise InvalidParameterError("alpha", alpha, "must be a number in [0, 1]")
    return float(alpha)


def check_beta(beta: float | None) -> float | None:
    """The improved form's weight: None (the original difference of logprobs) or >= 0."""
    if beta is None:
        return None
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not beta >= 0.0 or \
            not math.isfinite(beta):
        raise InvalidParameterError("beta", beta, "must be None or a finite number >= 0")
    return float(beta)


def check_amateur_temperature(tau: float) -> float:
    """The amateur's temperature: a finite number > 0 (1 leaves its logits as they are)."""
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not tau > 0.0 or \
            not math.isfinite(tau):
        raise InvalidParameterError("amateur_temperature", tau, "must be a finite number > 0")
    return float(tau)


def check_weight(name: str, value: float) -> float:
    """A finite real weight (DExperts' ``alpha``)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        raise InvalidParameterError(name, value, "must be a finite number")
    return float(value)


def plausible(expert: torch.Tensor, alpha: float) -> torch.Tensor:
    """``(B, V)`` True where ``p_expert >= alpha * max p_expert`` (always the argmax)."""
    cut = torch.full((expert.shape[0],), alpha, dtype=torch.float32)
    return min_p_filter(expert.to(torch.float32), cut) != NEG_INF


def contrastive_scores(expert: torch.Tensor, amateur: torch.Tensor, alpha: float = 0.1,
                       beta: float | None = None, amateur_temperature: float = 1.0
                       ) -> torch.Tensor:
    """Contrastive decoding scores (see the module docstring); float32 ``(B, V)``.
    ``amateur_temperature`` 1 leaves the amateur's logits bit for bit as they are."""
    e, a = expert.to(torch.float32), amateur.to(torch.float32) / amateur_temperature
    if beta is None:
        scores = log_softmax_rows(e) - log_softmax_rows(a)
    else:
        scores = (1.0 + beta) * e - beta * a
    return scores.masked_fill(~plausible(e, alpha), NEG_INF)


def dexperts_logits(base: torch.Tensor, expert: torch.Tensor, antiexpert: torch.Tensor,
                    alpha: float = 1.0) -> torch.Tensor:
    """DExperts: ``base + alpha * (expert - antiexpert)``; float32 ``(B, V)``."""
    f = torch.float32
    return base.to(f) + alpha * (expert.to(f) - antiexpert.to(f))


def proxy_tuning_logits(base: torch.Tensor, tuned: torch.Tensor, untuned: torch.Tensor
                        ) -> torch.Tensor:
    """Proxy tuning: ``base + (tuned - untuned)``; float32 ``(B, V)``."""
    return dexperts_logits(base, tuned, untuned, 1.0)
