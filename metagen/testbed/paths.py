"""Solution paths of a story: different orders and groupings with different intermediate values.

A solution is one step per line (``23 + 19 = 42``) and ends with GSM8K's answer line ``#### 42``.
Within an additive segment (the events between two multiplications) a path may apply the changes
one by one in any order, sum the gains and the losses first, or take the net change first; a
shared-price event may be grouped, ``(3+5)*12``, or distributed, ``3*12 + 5*12``; products may be
computed up front or where they are used. Every intermediate value stays in ``[0, MAX_VALUE]``.
Diverse paths decorrelate a policy's errors, the condition under which self-consistency helps
(Wang et al. 2023).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from metagen.testbed.story import Event

MAX_VALUE = 99
_LINE = re.compile(r"^(\d+) ([-+*/]) (\d+) = (\d+)$")


@dataclass(slots=True)
class _Term:
    sign: int
    value: int
    pre: list[str]  # lines that compute value (empty for a literal)


class _Fail(Exception):
    pass


def _op(a: int, op: str, b: int) -> tuple[str, int]:
    if op == "+":
        c = a + b
    elif op == "-":
        c = a - b
    elif op == "*":
        c = a * b
    else:
        if b == 0 or a % b:
            raise _Fail
        c = a // b
    if not 0 <= c <= MAX_VALUE:
        raise _Fail
    return f"{a} {op} {b} = {c}", c


def _terms(rng: random.Random, events: list[Event], canonical: bool) -> list[_Term]:
    terms: list[_Term] = []
    for e in events:
        s, n = e.sign, e.nums
        if e.kind in ("add", "sub"):
            terms.append(_Term(s, n[0], []))
        elif e.kind in ("addmul", "submul"):
            line, v = _op(n[0], "*", n[1])
            terms.append(_Term(s, v, [line]))
        elif canonical or rng.random() < 0.5:  # grouped: (k1 + k2) * m
            l1, t = _op(n[0], "+", n[1])
            l2, v = _op(t, "*", n[2])
            terms.append(_Term(s, v, [l1, l2]))
        else:  # distributed: k1 * m + k2 * m
            for k in (n[0], n[1]):
                line, v = _op(k, "*", n[2])
                terms.append(_Term(s, v, [line]))
    return terms


def _fold(terms: list[_Term], out: list[str], inline: bool) -> int | None:
    acc: int | None = None
    for t in terms:
        if inline:
            out.extend(t.pre)
        if acc is None:
            acc = t.value
        else:
            line, acc = _op(acc, "+", t.value)
            out.append(line)
    return acc


def _segment(rng: random.Random, v: int, events: list[Event], canonical: bool) -> tuple[list[str], int]:
    terms = _terms(rng, events, canonical)
    out: list[str] = []
    inline = canonical or rng.random() < 0.7
    if not inline:
        pre = [t for t in terms if t.pre]
        rng.shuffle(pre)
        for t in pre:
            out.extend(t.pre)
    strategy = "seq" if canonical else rng.choice(("seq", "seq", "group", "net"))
    gains = [t for t in terms if t.sign > 0]
    losses = [t for t in terms if t.sign < 0]
    if strategy == "seq" or not gains or not losses or len(terms) < 2:
        order = list(terms)
        if not canonical and rng.random() < 0.6:
            rng.shuffle(order)
        for t in order:
            if inline:
                out.extend(t.pre)
            line, v = _op(v, "+" if t.sign > 0 else "-", t.value)
            out.append(line)
        return out, v
    rng.shuffle(gains)
    rng.shuffle(losses)
    first_gains = rng.random() < 0.5
    parts = [gains, losses] if first_gains else [losses, gains]
    sums = [_fold(p, out, inline) for p in parts]
    g, l = (sums[0], sums[1]) if first_gains else (sums[1], sums[0])
    assert g is not None and l is not None
    if strategy == "group":
        if first_gains:
            line, v = _op(v, "+", g); out.append(line)
            line, v = _op(v, "-", l); out.append(line)
        else:
            line, v = _op(v, "-", l); out.append(line)
            line, v = _op(v, "+", g); out.append(line)
    else:  # net change first
        if g >= l:
            line, d = _op(g, "-", l); out.append(line)
            line, v = _op(v, "+", d); out.append(line)
        else:
            line, d = _op(l, "-", g); out.append(line)
            line, v = _op(v, "-", d); out.append(line)
    return out, v


def solution_path(rng: random.Random, start: int, events: list[Event],
                  canonical: bool = False) -> str | None:
    """One solution text (lines + ``#### N``), random unless ``canonical`` (story order, inline
    products, grouped shared prices). ``None`` when the drawn path leaves ``[0, MAX_VALUE]``."""
    lines: list[str] = []
    v = start
    seg: list[Event] = []
    try:
        for e in events + [Event("end", ())]:
            if e.kind in ("mul", "div", "end"):
                if seg:
                    seg_lines, v = _segment(rng, v, seg, canonical)
                    lines.extend(seg_lines)
                    seg = []
                if e.kind != "end":
                    line, v = _op(v, "*" if e.kind == "mul" else "/", e.nums[0])
                    lines.append(line)
            else:
                seg.append(e)
    except _Fail:
        return None
    return "".join(f"{ln}\n" for ln in lines) + f"#### {v}"


def verify_solution(text: str, answer: int) -> bool:
    """Every line but the last is a correct ``a op b = c`` step and the last is ``#### answer``.

    Checks the format and the arithmetic, not that the steps use the question's numbers."""
    lines = text.split("\n")
    if not lines or lines[-1] != f"#### {answer}":
        return False
    for ln in lines[:-1]:
        m = _LINE.match(ln)
        if m is None:
            return False
        a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        try:
            _, got = _op(a, op, b)
        except _Fail:
            return False
        if got != c:
            return False
    return True


def step_is_correct(line: str) -> bool | None:
    """Arithmetic check of one step line: True/False for ``a op b = c``, None if not such a line."""
    m = _LINE.match(line.strip())
    if m is None:
        return None
    a, op, b, c = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
    if op == "/":
        return b != 0 and a == b * c
    return {"+": a + b, "-": a - b, "*": a * b}[op] == c


def is_well_formed(text: str) -> bool:
    """Format only: every line but the last is ``a op b = c`` and the last is ``#### N``."""
    lines = text.split("\n")
    if len(lines) < 1 or re.fullmatch(r"#### \d+", lines[-1]) is None:
        return False
    return all(_LINE.match(ln) is not None for ln in lines[:-1])
