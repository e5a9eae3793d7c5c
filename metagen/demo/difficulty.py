"""Accuracy by difficulty: the demo's optional ``by_difficulty`` field of a result row.

Testbed problems carry ``difficulty`` (the number of reasoning steps); compute-optimal choices
differ by difficulty (Snell et al. 2024), so every row can report its accuracy per level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import InvalidParameterError


def difficulties_of(problems: Sequence[Any]) -> list[str] | None:
    """Each problem's ``difficulty`` as a string key, or ``None`` unless every problem has one."""
    if not problems or not all(hasattr(p, "difficulty") for p in problems):
        return None
    return [str(p.difficulty) for p in problems]


def accuracy_by_difficulty(correct: Sequence[bool], difficulties: Sequence[str]
                           ) -> dict[str, float]:
    """``{difficulty: fraction correct}`` over the problems of that difficulty, keys in
    ascending order (numerically when they are integers). Raises ``InvalidParameterError``
    when the two sequences differ in length."""
    if len(correct) != len(difficulties):
        raise InvalidParameterError("difficulties", len(difficulties),
                                    f"must match len(correct)={len(correct)}")
    right: dict[str, int] = {}
    total: dict[str, int] = {}
    for ok, d in zip(correct, difficulties):
        total[d] = total.get(d, 0) + 1
        right[d] = right.get(d, 0) + bool(ok)
    keys = sorted(total, key=lambda k: (0, int(k), k) if k.lstrip("-").isdigit() else (1, 0, k))
    return {k: right[k] / total[k] for k in keys}


def with_difficulty(row: dict[str, Any], correct: Sequence[bool],
                    difficulties: Sequence[str] | None) -> dict[str, Any]:
    """``row`` with ``by_difficulty`` added when ``difficulties`` is known (mutates, returns it)."""
    if difficulties is not None:
        row["by_difficulty"] = accuracy_by_difficulty(correct, difficulties)
    return row
