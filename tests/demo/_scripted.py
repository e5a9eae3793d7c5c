"""Scripted pieces for the demo tests: problems, an ORM and a PRM (no models)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from metagen.scorers.usage import UsageMeter

ORM_FLOPS_PER_CALL = 10.0
PRM_FLOPS_PER_STEP = 100.0


@dataclass
class Prob:
    question: str
    answer: int
    difficulty: int


def final_int(text: str) -> str | None:
    found = re.findall(r"-?\d+", text.split("####")[-1]) if "####" in text else []
    return found[-1] if found else None


def grade(text: str, answer: object) -> bool:
    got = final_int(text)
    return got is not None and int(got) == int(str(answer))


def same(a: object, b: object) -> bool:
    return str(a) == str(b)


class ScriptedORM:
    """Scripted ORM: a score per completion text (default 0.1); meters usage."""

    def __init__(self, table: dict[str, float] | None = None) -> None:
        self.table, self.calls, self._meter = table or {}, [], UsageMeter()

    @property
    def usage(self):
        return self._meter.usage

    def score(self, prompts, completions):
        self.calls.append(list(completions))
        self._meter.add(len(completions), ORM_FLOPS_PER_CALL)
        return [self.table.get(c, 0.1) for c in completions]


class ScriptedPRM:
    """Scripted PRM: a score per step text (default 0.5); meters ``PRM_FLOPS_PER_STEP`` per
    scored step and records every ``score_steps`` call."""

    def __init__(self, table: dict[str, float] | None = None) -> None:
        self.table, self.calls, self._meter = table or {}, [], UsageMeter()

    @property
    def usage(self):
        return self._meter.usage

    def score_steps(self, prompts, steps):
        self.calls.append([list(chain) for chain in steps])
        n_steps = sum(len(chain) for chain in steps)
        self._meter.add(n_steps, PRM_FLOPS_PER_STEP * n_steps)
        return [[self.table.get(s, 0.5) for s in chain] for chain in steps]
