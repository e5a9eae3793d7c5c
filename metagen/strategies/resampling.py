"""The math of particle filtering over reasoning steps, as pure functions: weights from rewards,
the effective sample size and systematic resampling (Puri et al. 2025, "A Probabilistic Inference
Approach to Inference-Time Scaling of LLMs using Particle-Based Monte Carlo Methods"; Doucet &
Johansen 2009 for the estimators)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from metagen.errors import InvalidParameterError


def softmax_weights(rewards: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Normalised weights ``exp(r_i / T) / sum_j exp(r_j / T)`` (computed stably); ``T > 0``."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise InvalidParameterError("temperature", temperature, "must be a positive number")
    if not rewards:
        raise InvalidParameterError("rewards", rewards, "need at least one particle")
    if not all(math.isfinite(r) for r in rewards):
        raise InvalidParameterError("rewards", list(rewards), "must be finite")
    top = max(rewards)
    exps = [math.exp((r - top) / temperature) for r in rewards]
    total = sum(exps)
    return [e / total for e in exps]


def effective_sample_size(weights: Sequence[float]) -> float:
    """``(sum w)^2 / sum w^2``: N for uniform weights, 1 when one particle has all the weight."""
    if not weights or any(w < 0 for w in weights) or sum(weights) <= 0:
        raise InvalidParameterError("weights", list(weights),
                                    "need non-negative weights with a positive sum")
    return sum(weights) ** 2 / sum(w * w for w in weights)


def systematic_resample(weights: Sequence[float], u: float) -> list[int]:
    """Systematic resampling: ``len(weights)`` indices, index ``i`` taken once per point
    ``(u + k) / N`` (k = 0..N-1) that falls in its slice of the cumulative normalised weights.
    ``u`` in [0, 1) is the one uniform draw; the output is sorted and each index appears
    ``floor(N w_i)`` or ``ceil(N w_i)`` times."""
    if not 0.0 <= u < 1.0:
        raise InvalidParameterError("u", u, "must be in [0, 1)")
    effective_sample_size(weights)  # validates
    n, total = len(weights), float(sum(weights))
    out: list[int] = []
    cum, i = weights[0] / total, 0
    for k in range(n):
        point = (u + k) / n
        while point >= cum and i < n - 1:
            i += 1
            cum += weights[i] / total
        out.append(i)
    return out
