"""Diverse verifier tree search (DVTS; Beeching, Tunstall & Rush 2024, "Scaling test-time
compute with open models").

Beam search with a PRM tends to collapse onto one reasoning path when the budget is large. DVTS
splits the ``subtrees * branching`` samples of a step into ``subtrees`` independent subtrees:
each starts from its own ``branching`` first steps and then runs a greedy PRM search of width 1
(the best child is kept, it gets ``branching`` children, ...) until it finishes. The subtrees
never compare with each other until the end, where the answer is chosen over all subtrees'
finished solutions (by PRM value, or a vote). All subtrees of all prompts advance together: one
generate call and one scorer call per search step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import Select, positive_int, run_beams
from metagen.strategies.step_config import SelectingStepConfig, samples_per_step
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.types import Result, SamplingParams


def dvts(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike, *,
         subtrees: int = 4, branching: int = 4, max_depth: int = 16,
         params: SamplingParams | None = None,
         steps: StepDefinition = DEFAULT_STEPS, aggregation: StepAggregation = "last",
         select: Select = "score", answer: Callable[[str], str | None] = default_answer,
         budget: Budget = UNLIMITED) -> list[Result]:
    """DVTS over a list of prompts; one Result per prompt (``trace["tree"]`` tags each node's
    subtree in ``group``). ``subtrees * branching`` is the number of samples per search step
    (the ``N`` of Beeching et al., with ``M = branching``)."""
    positive_int("subtrees", subtrees)
    positive_int("branching", branching)
    choose_by(select, [])
    search = StepSearch("dvts", generator, prompts, prm, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    run_beams(search, subtrees, 1, branching)
    return search.results(
        lambda tree, cands: choose_by(select, cands, answer),
        trace={"subtrees": subtrees, "branching": branching, "select": select,
               "aggregation": aggregation},
        candidates=lambda tree: [n for n in tree.terminal_leaves() if not n.pruned])


@dataclass(frozen=True, slots=True)
class DVTSConfig(SelectingStepConfig):
    """dvts's parameters besides N (samples per search step)."""

    subtrees: int | None = param(None, "independent subtrees (default N // branching)", lo=1)
    branching: int | None = param(None, "children per path (default min(4, N))", lo=1)


def _scale(n: int) -> dict[str, int]:
    beams = samples_per_step(n)
    return {"subtrees": beams["width"], "branching": beams["branching"]}


SPEC = StrategySpec("dvts", dvts, "each_n", "DVTS (PRM)", DVTSConfig, scale=_scale,
                    needs=frozenset({"prm"}), scorer_args={"prm": "prm"})
