"""Budgets on the FLOPs axis (pure functions): the default geometric grid and which candidates a
budget allows.

The grid is 1, 2 and 5 times the powers of ten, from the smallest such value at or above the
cheapest candidate's mean FLOPs per item to the smallest at or above the dearest's: the first
budget allows the cheapest candidate, the last allows them all. At budget ``B`` a candidate is
allowed on a set of items when its mean FLOPs per item over them is ``<= B``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from metagen.errors import InvalidParameterError
from metagen.frontier.candidates import Candidates

STEPS = (1.0, 2.0, 5.0)  # the grid's mantissas


def budget_grid(means: Iterable[float]) -> list[float]:
    """The default budgets spanning the candidates' mean FLOPs per item ``means`` (see the
    module docstring); ``InvalidParameterError`` naming ``budgets`` when there are none or one
    is not a positive finite number."""
    values = list(means)
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise InvalidParameterError("budgets", values, "the candidates' mean FLOPs must be "
                                    "positive finite numbers")
    lo, hi = min(values), max(values)
    out: list[float] = []
    exponent = math.floor(math.log10(lo)) - 1
    while not out or out[-1] < hi:
        for step in STEPS:
            value = float(f"{step}e{exponent}")  # exact decimal: 5e7, not 5 * 10.0**7
            if value >= lo and (not out or out[-1] < hi):
                out.append(value)
        exponent += 1
    return out


def check_budgets(budgets: Sequence[float]) -> list[float]:
    """``budgets`` sorted and deduplicated; ``InvalidParameterError`` naming ``budgets`` when
    empty or when one is not a positive finite number."""
    if not budgets or not all(isinstance(b, (int, float)) and not isinstance(b, bool)
                              and math.isfinite(b) and b > 0 for b in budgets):
        raise InvalidParameterError("budgets", list(budgets), "must be positive FLOP counts")
    return sorted({float(b) for b in budgets})


def allowed(cands: Candidates, items: Sequence[str], budget: float) -> list[str]:
    """The candidates whose mean FLOPs per item over ``items`` is ``<= budget``, sorted."""
    return [name for name in cands.names if cands.mean_flops(name, items) <= budget]
