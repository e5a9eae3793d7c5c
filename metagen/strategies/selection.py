"""The selection half of a parallel strategy, as pure functions and a small protocol.

A parallel meta-generator (Welleck et al. 2024, section 4) is *sample N, then select*. Sampling is
shared (:mod:`metagen.strategies.parallel`); each strategy contributes a :class:`Selector` whose
``select(prompts, groups)`` picks one completion per group — for a whole batch of groups at once,
so model-based scorers run one batched call. The same selector reduces groups inside
:class:`~metagen.strategies.compose.StrategyGenerator`, which is how strategies compose.

Tie-breaking everywhere: among equal values, the LOWEST candidate index (sample order) wins.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from metagen.answers.key import group_by_canonical
from metagen.generators.base import Prompt
from metagen.scorers.usage import usage_of
from metagen.types import Completion, Usage


@dataclass(slots=True)
class Selection:
    """One group's outcome: the chosen index, a score per candidate, JSON-friendly details."""

    index: int
    scores: list[float | None]
    trace: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Selector(Protocol):
    """Picks one completion per group. ``groups`` are non-empty lists of successful samples;
    ``prompts[g]`` is the (text) prompt of group ``g``. Raises if a scorer fails."""

    name: str

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]: ...

    @property
    def usage(self) -> Usage: ...


def scorers_usage(*scorers: object) -> Usage:
    """Cumulative usage of the given scorers (plain callables count as nothing)."""
    total = Usage()
    for scorer in scorers:
        if scorer is not None:
            total = total + usage_of(scorer)
    return total


def argmax_first(values: Sequence[float]) -> int:
    """Index of the largest value; the lowest index among ties. Raises on an empty list."""
    if not values:
        raise ValueError("argmax of an empty list")
    best = 0
    for i, value in enumerate(values):
        if value > values[best]:
            best = i
    return best


def group_answers(answers: Sequence[Any], match: Callable[[Any, Any], bool],
                  canonical: Callable[[Any], str] | None = None) -> list[int | None]:
    """Equivalence-class id of each answer (ids in order of first appearance); None stays None.
    See :func:`metagen.answers.key.group_by_canonical`, which this is."""
    return group_by_canonical(answers, match, canonical)


def flatten(prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
            ) -> tuple[list[Prompt], list[str], list[int]]:
    """Pairs (prompt, text) of every candidate of every group, plus each group's start offset."""
    flat_p: list[Prompt] = []
    flat_c: list[str] = []
    starts: list[int] = []
    for prompt, group in zip(prompts, groups):
        starts.append(len(flat_c))
        flat_p.extend([prompt] * len(group))
        flat_c.extend(c.text for c in group)
    return flat_p, flat_c, starts
