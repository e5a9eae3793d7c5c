"""Stopping rules of adaptive self-consistency, as pure functions of the votes so far.

- :func:`beta_leader_probability` (Aggarwal et al. 2023, "Let's Sample Step by Step: Adaptive-
  Consistency for Efficient Reasoning with LLMs", the Beta criterion): with ``a`` votes for the
  leading answer and ``b`` for the runner-up, the leader's share ``p = p1 / (p1 + p2)`` has the
  posterior ``Beta(a + 1, b + 1)`` under a uniform prior, and the probability that the leader
  really is the more likely answer is ``P(p > 1/2)``. For integer parameters this is exactly
  ``P(Binomial(a + b + 1, 1/2) <= a)``, a finite sum (no sampling, no special functions).
- :func:`window_unanimous` (Li et al. 2024, "Escape Sky-high Cost: Early-stopping Self-
  Consistency for Multi-step Reasoning"): stop once every answer of the latest window is the
  same (zero entropy), abstentions never counting as agreement.
- :func:`vote_decided` applies either rule to the class ids of the samples drawn so far.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

from metagen.errors import InvalidParameterError

StopRule = Literal["beta", "window"]
STOP_RULES: tuple[str, ...] = ("beta", "window")


def beta_leader_probability(top: int, second: int) -> float:
    """``P(p1 > p2)`` for ``top >= second >= 0`` votes: ``P(Binomial(top + second + 1, 1/2)
    <= top)``. 0.5 for a tie; 1 - 2**-(top + 1) when the runner-up has no vote."""
    if isinstance(top, bool) or isinstance(second, bool) or not isinstance(top, int) \
            or not isinstance(second, int) or second < 0 or top < second:
        raise InvalidParameterError("votes", (top, second),
                                    "need integer counts with top >= second >= 0")
    trials = top + second + 1
    return sum(math.comb(trials, k) for k in range(top + 1)) / 2 ** trials


def window_unanimous(classes: Sequence[int | None], window: int) -> bool:
    """True when the last ``window`` samples exist and all have the same (non-None) answer."""
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InvalidParameterError("window", window, "must be a positive integer")
    if len(classes) < window:
        return False
    last = classes[-window:]
    return last[0] is not None and all(c == last[0] for c in last)


def top_two(classes: Sequence[int | None]) -> tuple[int, int]:
    """(votes of the leading answer, votes of the runner-up); abstentions (None) do not vote."""
    counts = sorted(Counter(c for c in classes if c is not None).values(), reverse=True)
    return (counts[0] if counts else 0, counts[1] if len(counts) > 1 else 0)


def vote_decided(classes: Sequence[int | None], rule: StopRule, *, confidence: float = 0.95,
                 window: int = 4) -> bool:
    """Whether sampling may stop: ``"beta"``: ``beta_leader_probability(top_two(classes)) >=
    confidence`` (and the leader has a vote); ``"window"``: :func:`window_unanimous`."""
    if rule == "window":
        return window_unanimous(classes, window)
    if rule != "beta":
        raise InvalidParameterError("rule", rule, f"must be one of {', '.join(STOP_RULES)}")
    top, second = top_two(classes)
    return top > 0 and beta_leader_probability(top, second) >= confidence


def samples_needed(classes: Sequence[int | None], batch: int, rule: StopRule, *,
                   confidence: float = 0.95, window: int = 4) -> int:
    """How many of the ordered samples ``classes`` adaptive self-consistency draws when its
    rounds of ``batch`` receive them in this order: the first multiple of ``batch`` (capped at
    ``len(classes)``) at which :func:`vote_decided` holds, else ``len(classes)``. Replaying a
    fixed run's samples through it isolates what the stopping rule costs from sampling noise."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise InvalidParameterError("batch", batch, "must be a positive integer")
    k = 0
    while k < len(classes):
        k = min(k + batch, len(classes))
        if vote_decided(classes[:k], rule, confidence=confidence, window=window):
            return k
    return len(classes)
