"""Seeded generator of the testbed's arithmetic word problems, its splits, prompt and grader.

Splits never overlap: a problem's split is a function of its question text (SHA-256 bucket:
80% train, 10% val, 10% test), and :func:`make_problems` keeps only candidates of the requested
split. The same ``(split, n, seed, difficulties)`` always gives the same list.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError
from metagen.tasks.answer import answers_match, extract_answer
from metagen.testbed.paths import MAX_VALUE, solution_path
from metagen.testbed.story import Event, render

Split = Literal["train", "val", "test"]
SPLITS: tuple[str, ...] = ("train", "val", "test")
DEFAULT_DIFFICULTIES: tuple[int, ...] = (1, 2, 3, 4, 5, 6)
MAX_DIFFICULTY = 10
MAX_PATHS = 8


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem. ``solutions[0]`` is the canonical path (story order); all are valid."""

    uid: str
    question: str
    answer: int
    difficulty: int
    solutions: tuple[str, ...]
    start: int = 0
    events: tuple[Event, ...] = ()


def split_of(question: str) -> str:
    """The split a question belongs to (by hashing its text)."""
    bucket = int(hashlib.sha256(question.encode()).hexdigest()[:8], 16) % 20
    return "train" if bucket < 16 else ("val" if bucket < 18 else "test")


def format_prompt(problem: Problem) -> str:
    """The exact text the policy is conditioned on (the tokenizer adds BOS in front)."""
    return f"Question: {problem.question}\nAnswer:\n"


def grade(completion_text: str, answer: int) -> bool:
    """GSM8K-style grading: the extracted final answer equals ``answer`` as a number."""
    return answers_match(extract_answer(completion_text), answer)


def _additive(rng: random.Random, v: int, budget: int) -> Event | None:
    kinds = [k for k, c in (("add", 1), ("sub", 1), ("addmul", 2), ("submul", 2),
                            ("addshared", 3), ("subshared", 3)) if c <= budget]
    weights = {"add": 4, "sub": 4, "addmul": 3, "submul": 2, "addshared": 1, "subshared": 1}
    kind = rng.choices(kinds, [weights[k] for k in kinds])[0]
    if kind == "add":
        return Event(kind, (rng.randint(2, 29),))
    if kind == "sub":
        return Event(kind, (rng.randint(2, v - 1),)) if v > 2 else None
    if kind in ("addmul", "submul"):
        e = Event(kind, (rng.randint(2, 6), rng.randint(2, 9)))
    else:
        e = Event(kind, (rng.randint(2, 5), rng.randint(2, 5), rng.randint(2, 9)))
    if e.sign < 0 and e.amount >= v:
        return None
    return e


def _story(rng: random.Random, difficulty: int) -> tuple[int, list[Event]] | None:
    start = rng.randint(5, 39)
    budget = difficulty
    use_div = rng.random() < 0.3
    budget -= use_div
    mul_after = rng.randint(1, budget - 1) if budget >= 2 and rng.random() < 0.3 else None
    events: list[Event] = []
    v, spent = start, 0
    e: Event | None
    while spent < budget:
        if mul_after is not None and spent == mul_after:
            e = Event("mul", (rng.choice((2, 2, 3)),))
            v *= e.nums[0]
        else:
            limit = budget - spent - (1 if mul_after is not None and spent < mul_after else 0)
            if mul_after is not None and spent < mul_after:
                limit = mul_after - spent
            e = _additive(rng, v, limit)
            if e is None:
                return None
            v += e.sign * e.amount
        if not 0 <= v <= MAX_VALUE:
            return None
        events.append(e)
        spent += e.cost
    if use_div:
        divisors = [k for k in range(2, 10) if v % k == 0 and v > 0]
        if not divisors:
            return None
        events.append(Event("div", (rng.choice(divisors),)))
    return start, events


def make_problem(rng: random.Random, difficulty: int) -> Problem | None:
    """One random problem of the given difficulty, or ``None`` if the draw was infeasible."""
    story = _story(rng, difficulty)
    if story is None:
        return None
    start, events = story
    canonical = solution_path(rng, start, events, canonical=True)
    if canonical is None:
        return None
    question = render(rng, start, events)
    paths = [canonical]
    for _ in range(4 * MAX_PATHS):
        if len(paths) >= MAX_PATHS:
            break
        p = solution_path(rng, start, events)
        if p is not None and p not in paths:
            paths.append(p)
    answer = int(canonical.rsplit("#### ", 1)[1])
    uid = "tb-" + hashlib.sha256(question.encode()).hexdigest()[:12]
    return Problem(uid, question, answer, difficulty, tuple(paths), start, tuple(events))


def make_problems(split: Split, n: int, seed: int = 0,
                  difficulties: Sequence[int] | None = None) -> list[Problem]:
    """``n`` distinct problems of ``split``, deterministic in all arguments. Problem ``i`` has
    difficulty ``difficulties[i % len(difficulties)]`` (default 1..6, balanced)."""
    if split not in SPLITS:
        raise InvalidParameterError("split", split, f"must be one of {SPLITS}")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidParameterError("n", n, "must be a non-negative integer")
    diffs = tuple(DEFAULT_DIFFICULTIES if difficulties is None else difficulties)
    if not diffs or any(not isinstance(d, int) or not 1 <= d <= MAX_DIFFICULTY for d in diffs):
        raise InvalidParameterError("difficulties", difficulties,
                                    f"must be a non-empty sequence of ints in [1, {MAX_DIFFICULTY}]")
    out: list[Problem] = []
    for p in iter_problems(split, seed, diffs):
        if len(out) >= n:
            break
        out.append(p)
    return out


def iter_problems(split: Split, seed: int = 0,
                  difficulties: Sequence[int] = DEFAULT_DIFFICULTIES) -> Iterator[Problem]:
    """The endless, deterministic stream that :func:`make_problems` takes its first ``n`` from
    (distinct questions; problem ``i`` has difficulty ``difficulties[i % len]``)."""
    rng = random.Random(f"metagen-testbed:{split}:{seed}")
    seen: set[str] = set()
    diffs = tuple(difficulties)
    while True:
        p = make_problem(rng, diffs[len(seen) % len(diffs)])
        if p is None or p.question in seen or split_of(p.question) != split:
            continue
        seen.add(p.question)
        yield p
