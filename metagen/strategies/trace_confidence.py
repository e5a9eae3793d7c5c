"""DeepConf's confidence measures (Fu et al. 2025, "Deep Think with Confidence"), as pure
functions of a trace's top-k log-probabilities.

- token confidence ``C_t = -(1/k) * sum_j log P_t(j)`` over the ``k`` most likely tokens at
  position ``t`` (:func:`token_confidence`): high when the model is sure (one token takes the mass,
  the other top-k alternatives are very unlikely), low when the distribution is flat;
- group confidence: the mean of ``C_t`` over a sliding window of ``window`` tokens ending at
  ``t``; a trace's *lowest group confidence* is the minimum over its complete windows (the mean of
  all its tokens when it is shorter than one window — :func:`~metagen.scorers.likelihood.
  lowest_window_mean`);
- the online stop (:func:`stop_position`): a trace is stopped at the first complete window whose
  mean falls below the threshold; the threshold comes from warm-up traces
  (:func:`confidence_threshold`): the ``(1 - keep)`` quantile of their lowest group confidences, so
  that a fraction ``keep`` of them would pass (DeepConf-low keeps 10 %, DeepConf-high 90 %).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from metagen.errors import InvalidParameterError
from metagen.scorers.likelihood import lowest_window_mean


def token_confidence(top_logprobs: Mapping[int, float], k: int | None = None) -> float:
    """``-mean`` of the ``k`` largest log-probabilities of one position (all given when ``k``
    is None). Raises ``InvalidParameterError`` naming ``top_logprobs`` when there are fewer."""
    values = sorted(top_logprobs.values(), reverse=True)
    k = len(values) if k is None else k
    if k < 1 or len(values) < k:
        raise InvalidParameterError("top_logprobs", len(values),
                                    f"need at least k={k} alternatives per token")
    return -sum(values[:k]) / k


def lowest_group_confidence(token_confs: Sequence[float], window: int) -> float:
    """The lowest sliding-window mean of ``token_confs`` (the mean of all when shorter)."""
    return lowest_window_mean(token_confs, window)


def stop_position(token_confs: Sequence[float], window: int, threshold: float,
                  start: int = 0) -> int | None:
    """The number of tokens after which the trace is stopped: ``t + 1`` for the first complete
    window ``[t - window + 1, t]`` with ``t >= start`` whose mean is below ``threshold``; None
    when every complete window from ``start`` on passes (or none is complete yet)."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidParameterError("window", window, "must be a positive integer")
    first = max(start, window - 1)
    if len(token_confs) <= first:
        return None
    run = sum(token_confs[first - window + 1:first + 1])
    for t in range(first, len(token_confs)):
        if t > first:
            run += token_confs[t] - token_confs[t - window]
        if run / window < threshold:
            return t + 1
    return None


def confidence_threshold(lowest: Sequence[float], keep: float) -> float:
    """The threshold that a fraction ``keep`` (in (0, 1]) of the warm-up traces' lowest group
    confidences meet: their ``100 * (1 - keep)`` percentile (linear interpolation, as numpy's
    ``percentile``, which DeepConf's reference code uses)."""
    if not lowest:
        raise InvalidParameterError("warmup", 0, "need at least one warm-up trace")
    if isinstance(keep, bool) or not isinstance(keep, (int, float)) or not 0.0 < keep <= 1.0:
        raise InvalidParameterError("keep", keep, "must be in (0, 1]")
    return float(np.percentile(np.asarray(lowest, dtype=float), 100.0 * (1.0 - keep)))
