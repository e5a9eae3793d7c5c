"""The story grammar of the testbed: events that change a person's count of things or money.

A problem is a start value followed by events, each one operation on the running value:

    add a | sub a                 1 step   ("finds 12 more", "spends $8 on lunch")
    addmul k m | submul k m       2 steps  ("buys 4 packs with 6 each": k*m, then add)
    addshared k1 k2 m (sign ±)    3 steps  ("works 5 h on Sat and 3 h on Sun at $12/h")
    mul k                         1 step   ("then the number doubles"; splits additive segments)
    div k                         1 step   (final only: "shares equally among k friends")

Difficulty = number of steps of the shortest solution. This module only renders text; the
solution paths are made in :mod:`metagen.testbed.paths`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

NAMES = (("Tom", "he", "him", "his"), ("Ann", "she", "her", "her"), ("Ben", "he", "him", "his"),
         ("Mia", "she", "her", "her"), ("Leo", "he", "him", "his"), ("Zoe", "she", "her", "her"),
         ("Sam", "he", "him", "his"), ("Eva", "she", "her", "her"), ("Max", "he", "him", "his"),
         ("Lily", "she", "her", "her"))
FRIENDS = ("Kim", "Joe", "Ivy", "Dan", "Amy", "Rob", "Sue", "Ned")
OBJECTS = ("marbles", "stickers", "apples", "cards", "shells", "stamps", "coins", "beads")
MULT_WORD = {2: "doubles", 3: "triples"}


@dataclass(frozen=True, slots=True)
class Event:
    """One operation. ``kind`` in add, sub, addmul, submul, addshared, subshared, mul, div."""

    kind: str
    nums: tuple[int, ...]

    @property
    def cost(self) -> int:
        return {"addmul": 2, "submul": 2, "addshared": 3, "subshared": 3}.get(self.kind, 1)

    @property
    def sign(self) -> int:
        return -1 if self.kind.startswith("sub") else 1

    @property
    def amount(self) -> int:
        """The additive change (for additive kinds)."""
        n = self.nums
        if self.kind in ("add", "sub"):
            return n[0]
        if self.kind in ("addmul", "submul"):
            return n[0] * n[1]
        return (n[0] + n[1]) * n[2]


def _objects(rng: random.Random, e: Event, p: tuple[str, ...], o: str, f: str) -> str:
    name, he, him, his = p
    He = he.capitalize()
    n = e.nums + (0, 0, 0)  # the table below is built eagerly; unused slots are ignored
    table = {
        "add": [f"{He} finds {n[0]} more {o}.", f"{f} gives {him} {n[0]} {o}.",
                f"{He} gets {n[0]} {o} from {f}."],
        "sub": [f"{He} gives {n[0]} {o} to {f}.", f"{He} loses {n[0]} {o}.",
                f"{He} trades away {n[0]} {o}."],
        "addmul": [f"{He} buys {n[0]} packs of {o} with {n[1]} in each pack.",
                   f"{He} gets {n[0]} boxes with {n[1]} {o} each."],
        "submul": [f"{He} gives {n[0]} friends {n[1]} {o} each.",
                   f"{He} fills {n[0]} bags with {n[1]} {o} each and gives the bags away."],
        "addshared": [f"{He} buys {n[0]} packs on Monday and {n[1]} packs on Tuesday, "
                      f"each with {n[2]} {o}."],
        "subshared": [f"{He} gives {n[2]} {o} to each of {n[0]} boys and {n[1]} girls."],
        "mul": [f"Then the number of {o} {he} has {MULT_WORD.get(n[0], '')}."
                if n[0] in MULT_WORD else
                f"Then the number of {o} {he} has becomes {n[0]} times as large."],
    }
    return rng.choice(table[e.kind])


def _money(rng: random.Random, e: Event, p: tuple[str, ...], f: str) -> str:
    name, he, him, his = p
    He = he.capitalize()
    n = e.nums + (0, 0, 0)  # the table below is built eagerly; unused slots are ignored
    table = {
        "add": [f"{He} earns ${n[0]} for mowing a lawn.", f"{f} gives {him} ${n[0]}.",
                f"{He} gets ${n[0]} as a gift."],
        "sub": [f"{He} spends ${n[0]} on a book.", f"{He} pays ${n[0]} for lunch.",
                f"{He} gives ${n[0]} to {f}."],
        "addmul": [f"{He} works {n[0]} hours at ${n[1]} per hour.",
                   f"{He} sells {n[0]} cups of lemonade for ${n[1]} each."],
        "submul": [f"{He} buys {n[0]} pens that cost ${n[1]} each.",
                   f"{He} buys {n[0]} tickets at ${n[1]} each."],
        "addshared": [f"{He} works {n[0]} hours on Saturday and {n[1]} hours on Sunday "
                      f"at ${n[2]} per hour."],
        "subshared": [f"{He} buys {n[0]} red pens and {n[1]} blue pens at ${n[2]} each."],
        "mul": [f"Then {he} {MULT_WORD.get(n[0], '')} {his} money in a game."
                if n[0] in MULT_WORD else
                f"Then {his} money becomes {n[0]} times as large."],
    }
    return rng.choice(table[e.kind])


def render(rng: random.Random, start: int, events: list[Event]) -> str:
    """The question text of a story (a fresh choice of person, friend, object and phrasing)."""
    person = rng.choice(NAMES)
    friend = rng.choice(FRIENDS)
    money = rng.random() < 0.5
    obj = rng.choice(OBJECTS)
    name, he, him, his = person
    parts = [f"{name} has ${start}." if money else f"{name} has {start} {obj}."]
    final = events[-1] if events and events[-1].kind == "div" else None
    for e in events:
        if e.kind == "div":
            continue
        parts.append(_money(rng, e, person, friend) if money else _objects(rng, e, person, obj, friend))
    if final is None:
        parts.append(f"How many dollars does {name} have now?" if money
                     else f"How many {obj} does {name} have now?")
    else:
        k = final.nums[0]
        parts.append(f"{he.capitalize()} splits {his} money equally among {k} jars. "
                     f"How many dollars go in each jar?" if money else
                     f"{he.capitalize()} shares all {his} {obj} equally among {k} friends. "
                     f"How many {obj} does each friend get?")
    return " ".join(parts)
