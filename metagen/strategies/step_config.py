"""The parameters every step-level search shares, as config fields for the registry's specs
(:mod:`metagen.strategies.spec`), and the scale rules that map N to a search's own knobs (the
step searches are compared at matched samples per search step: see each spec's ``scale``)."""

from __future__ import annotations

from dataclasses import dataclass

from metagen.scorers.base import StepAggregation
from metagen.strategies.spec import param
from metagen.strategies.step_select import Select


@dataclass(frozen=True, slots=True)
class StepConfig:
    """A step search's depth and how it folds step scores into a path's value."""

    max_depth: int | None = param(None, "most steps in a solution", lo=1)
    aggregation: StepAggregation | None = param(
        None, "how step scores make a path's value: last, min, prod or mean")


@dataclass(frozen=True, slots=True)
class SelectingStepConfig(StepConfig):
    """A step search that ends by choosing among finished solutions."""

    select: Select | None = param(None, "the final choice: score, vote or weighted_vote")


def samples_per_step(n: int) -> dict[str, int]:
    """Beam-like searches at scale ``n``: ``branching = min(4, n)`` children per kept path and
    ``n // branching`` kept paths (Snell et al. 2024's M = 4), about ``n`` samples a step."""
    branching = min(4, n)
    return {"width": max(1, n // branching), "branching": branching}
