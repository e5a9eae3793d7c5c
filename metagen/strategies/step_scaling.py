"""Step-level search at a common scale ``n``, for scaling tables and plots (the demo).

``run_step_search(name, generator, prompts, prm, n)`` runs one of the PRM-guided searches with
options derived from ``n``, the number of step samples per search step, so that strategies are
compared at (roughly) matched generated tokens; the caller reports each Result's
``usage.generated_tokens`` on the x-axis, which is the exact matched quantity.

======================  =================================================================
name                    options at scale ``n``
======================  =================================================================
``step_beam``           ``width = max(1, n // 4)``, ``branching = min(4, n)`` (Snell et al.'s M=4)
``dvts``                ``subtrees = max(1, n // 4)``, ``branching = min(4, n)``
``rebase``              ``width = n``
``mcts``                ``branching = min(4, n)``, ``iterations = n``
``best_first``          ``branching = min(4, n)``, ``max_expansions = n``
``particle_filtering``  ``particles = n``
======================  =================================================================

At ``n`` samples per step and solutions of ``d`` steps, beam search, DVTS, REBASE and particle
filtering generate about ``n * d`` steps; MCTS and best-first at most ``branching * n`` (one
expansion per iteration, fewer when finished leaves are revisited or solutions found), which is
of the same order for the testbed's typical ``d`` of 2-4 steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike
from metagen.strategies.best_first import best_first
from metagen.strategies.dvts import dvts
from metagen.strategies.mcts import mcts
from metagen.strategies.particle_filter import particle_filtering
from metagen.strategies.rebase import rebase
from metagen.strategies.step_beam import positive_int, step_beam_search
from metagen.types import Result


def _beam(n: int) -> dict[str, int]:
    return {"width": max(1, n // 4), "branching": min(4, n)}


def _dvts(n: int) -> dict[str, int]:
    return {"subtrees": max(1, n // 4), "branching": min(4, n)}


def _mcts(n: int) -> dict[str, int]:
    return {"branching": min(4, n), "iterations": n}


def _best_first(n: int) -> dict[str, int]:
    return {"branching": min(4, n), "max_expansions": n}


STEP_SEARCHES: dict[str, tuple[Callable[..., list[Result]], Callable[[int], dict[str, int]]]] = {
    "step_beam": (step_beam_search, _beam),
    "dvts": (dvts, _dvts),
    "rebase": (rebase, lambda n: {"width": n}),
    "mcts": (mcts, _mcts),
    "best_first": (best_first, _best_first),
    "particle_filtering": (particle_filtering, lambda n: {"particles": n}),
}


def step_search_options(name: str, n: int) -> dict[str, int]:
    """The options ``run_step_search`` uses for ``name`` at scale ``n``."""
    if name not in STEP_SEARCHES:
        raise InvalidParameterError("name", name, f"must be one of {sorted(STEP_SEARCHES)}")
    positive_int("n", n)
    return STEP_SEARCHES[name][1](n)


def run_step_search(name: str, generator: Generator, prompts: Sequence[Prompt],
                    prm: ProcessRewardLike, n: int,
                    **options: Any) -> list[Result]:
    """Run step search ``name`` at scale ``n`` over ``prompts`` (one Result per prompt).

    ``options`` (``params``, ``steps``, ``budget``, ``max_depth``, ``aggregation``, ``select``
    where the strategy has it, ...) are passed through and override the derived ones.
    """
    fn, _ = STEP_SEARCHES.get(name, (None, None))
    kwargs: dict[str, Any] = dict(step_search_options(name, n))
    kwargs.update(options)
    assert fn is not None
    return fn(generator, prompts, prm, **kwargs)
