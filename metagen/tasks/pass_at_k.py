"""pass@k: the unbiased estimator of Chen et al. 2021 ("Evaluating Large Language Models Trained
on Code", HumanEval), from ``n`` samples of which ``c`` passed."""

from __future__ import annotations

from collections.abc import Sequence

from metagen.errors import InvalidParameterError


def pass_at_k(n: int, c: int, k: int) -> float:
    """``1 - C(n - c, k) / C(n, k)``: the probability that at least one of ``k`` samples drawn
    without replacement from the ``n`` (``c`` correct) is correct. Computed as the product
    ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which stays accurate where the binomials overflow.
    Raises :class:`InvalidParameterError` naming ``n``, ``c`` or ``k`` unless
    ``0 <= c <= n`` and ``1 <= k <= n`` (integers)."""
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidParameterError(name, value, "must be a non-negative integer")
    if c > n:
        raise InvalidParameterError("c", c, f"cannot exceed the number of samples n={n}")
    if not 1 <= k <= n:
        raise InvalidParameterError("k", k, f"must be in [1, n={n}]")
    if n - c < k:
        return 1.0
    miss = 1.0
    for i in range(n - c + 1, n + 1):
        miss *= 1.0 - k / i
    return 1.0 - miss


def mean_pass_at_k(counts: Sequence[tuple[int, int]], k: int) -> float:
    """The mean of :func:`pass_at_k` over problems given as ``(n, c)`` pairs (the benchmark's
    pass@k). Raises :class:`InvalidParameterError` for no problems or a bad pair."""
    if not counts:
        raise InvalidParameterError("counts", counts, "need at least one problem")
    return sum(pass_at_k(n, c, k) for n, c in counts) / len(counts)
