"""Synthetic wrong solutions: a reference path with one realistic mistake, carried forward.

The testbed policy's errors are of two kinds — an arithmetic slip (``19 + 26 = 49``) or a
misread number of the question (``57 - 21`` for "loses 29") — after which every later line
computes correctly from the wrong value. :func:`corrupt_solution` makes exactly such solutions
from a correct path, so the reward models see many more within-problem contrasts than the
policy's own samples give (policy samples of one problem are mostly all right or all wrong).
"""

from __future__ import annotations

import random
import re

_LINE = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")


def _apply(a: int, op: str, b: int) -> int | None:
    if op == "+":
        return a + b
    if op == "-":
        return a - b if a >= b else None
    if op == "*":
        return a * b
    return a // b if b and a % b == 0 else None


def corrupt_solution(solution: str, answer: int, rng: random.Random) -> tuple[str, int] | None:
    """``(text, index of the first wrong line)`` for ``solution`` (lines ``a op b = c`` then
    ``#### N``) with one slip or misread operand at a random line, every later line recomputed
    from the changed values, and a final answer that differs from ``answer``. ``None`` when the
    draw is infeasible (negative value, inexact division, or the answer happens to survive)."""
    lines = solution.split("\n")
    parsed = [_LINE.match(ln) for ln in lines[:-1]]
    if not parsed or any(m is None for m in parsed):
        return None
    rows = [(int(m[1]), m[2], int(m[3]), int(m[4])) for m in parsed]  # type: ignore[index]
    i = rng.randrange(len(rows))
    a, op, b, c = rows[i]
    new_c: int | None
    if rng.random() < 0.5:  # arithmetic slip in the result
        new_c = c + rng.choice((-10, -2, -1, 1, 2, 10))
        if new_c < 0 or new_c == c:
            return None
        rows[i] = (a, op, b, new_c)
    else:  # a misread operand
        if rng.random() < 0.5:
            a = a + rng.choice((-3, -2, -1, 1, 2, 3, 10, -10))
        else:
            b = b + rng.choice((-2, -1, 1, 2))
        new_c = _apply(a, op, b) if a >= 0 and b > 0 else None
        if new_c is None or new_c == c:
            return None
        rows[i] = (a, op, b, new_c)
    changed = {c: new_c}  # old value -> new value, carried into later lines that use it
    for j in range(i + 1, len(rows)):
        a, op, b, c = rows[j]
        a2, b2 = changed.get(a, a), changed.get(b, b)
        if (a2, b2) == (a, b):
            continue
        c2 = _apply(a2, op, b2)
        if c2 is None:
            return None
        rows[j] = (a2, op, b2, c2)
        changed[c] = c2
    final = rows[-1][3]
    if final == answer:
        return None
    text = "\n".join(f"{a} {op} {b} = {c}" for a, op, b, c in rows) + f"\n#### {final}"
    return text, i
