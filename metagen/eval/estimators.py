"""Unbiased estimators of metrics at k samples from n >= k drawn samples (pure functions).

- pass@k is :func:`metagen.tasks.pass_at_k.pass_at_k` (the project's one implementation).
- :func:`subsets`: the size-k subsets a subsampled metric (majority@k, best-of-k) averages over:
  all of them when there are at most ``max_subsets``, else ``max_subsets`` drawn without
  replacement of indices from a seeded RNG. The mean over all subsets is the unbiased estimate of
  the metric at k; over random subsets it is an unbiased Monte-Carlo estimate of that mean.
- :func:`mean_stderr`: the mean of per-item values and its standard error across items.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence

from metagen.errors import InvalidParameterError


def _check_nk(n: int, k: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise InvalidParameterError("n", n, "must be a positive integer")
    if not isinstance(k, int) or not 1 <= k <= n:
        raise InvalidParameterError("k", k, f"must be in [1, n={n}]")


def subsets(n: int, k: int, max_subsets: int, seed: int) -> list[tuple[int, ...]]:
    """Size-k subsets of ``range(n)`` (each sorted): every one when C(n, k) <= ``max_subsets``
    (in lexicographic order), else ``max_subsets`` distinct ones from ``random.Random(seed)``."""
    _check_nk(n, k)
    if not isinstance(max_subsets, int) or max_subsets < 1:
        raise InvalidParameterError("max_subsets", max_subsets, "must be a positive integer")
    if math.comb(n, k) <= max_subsets:
        return list(itertools.combinations(range(n), k))
    rng = random.Random(seed)
    seen: set[tuple[int, ...]] = set()
    out: list[tuple[int, ...]] = []
    while len(out) < max_subsets:
        pick = tuple(sorted(rng.sample(range(n), k)))
        if pick not in seen:
            seen.add(pick)
            out.append(pick)
    return out


def mean_stderr(values: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error of the mean) of per-item values; the error is 0 for one item and
    NaN mean for none."""
    m = len(values)
    if m == 0:
        return math.nan, math.nan
    mean = math.fsum(values) / m
    if m == 1:
        return mean, 0.0
    var = math.fsum((v - mean) ** 2 for v in values) / (m - 1)
    return mean, math.sqrt(var / m)
