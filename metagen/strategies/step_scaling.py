"""Step-level search at a common scale ``n``, over a batch of prompts, for scaling tables.

``run_step_search(name, generator, prompts, prm, n)`` runs one of the registry's PRM-guided
searches (a spec of family ``each_n`` that needs a ``prm``: ``step_beam_search``, ``dvts``,
``rebase``, ``mcts``, ``best_first``, ``particle_filtering``, ``tree_of_thoughts``,
``lookahead_search``) with the knobs its spec derives from ``n`` (:attr:`StrategySpec.scale`:
about ``n`` step samples per search step), so strategies are compared at roughly matched
generated tokens; the caller reports each Result's ``usage.generated_tokens`` on the x-axis,
which is the exact matched quantity.

At ``n`` samples per step and solutions of ``d`` steps, beam search, DVTS, REBASE and particle
filtering generate about ``n * d`` steps; MCTS and best-first at most ``branching * n`` (one
expansion per iteration, fewer when finished leaves are revisited or solutions found), which is
of the same order for the testbed's typical ``d`` of 2-4 steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike
from metagen.strategies.registry import names
from metagen.strategies.spec import StrategySpec
from metagen.types import Result


def step_searches() -> tuple[str, ...]:
    """The registered searches that run at each N on a process reward model."""
    from metagen.strategies.registry import specs

    return tuple(name for name in names(family="each_n") if "prm" in specs()[name].needs)


def _spec(name: str) -> StrategySpec:
    from metagen.strategies.registry import specs

    if name not in step_searches():
        raise InvalidParameterError("name", name, f"must be one of {list(step_searches())}")
    return specs()[name]


def step_search_options(name: str, n: int) -> dict[str, Any]:
    """The options ``run_step_search`` uses for ``name`` at scale ``n``."""
    return _spec(name).kwargs(n, {})


def run_step_search(name: str, generator: Generator, prompts: Sequence[Prompt],
                    prm: ProcessRewardLike, n: int,
                    **options: Any) -> list[Result]:
    """Run step search ``name`` at scale ``n`` over ``prompts`` (one Result per prompt).

    ``options`` (``params``, ``steps``, ``budget``, ``max_depth``, ``aggregation``, ``select``
    where the strategy has it, ...) are passed through and override the derived ones.
    """
    spec = _spec(name)
    kwargs = {**step_search_options(name, n), **options, spec.scorer_args["prm"]: prm}
    out = spec.function(generator, prompts, **kwargs)
    assert isinstance(out, list)
    return out
