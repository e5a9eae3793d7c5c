"""Best-first step search: a priority queue on PRM value, optionally A*-style with a depth term.

Per prompt the frontier holds unexpanded partial solutions keyed by a priority:

- ``heuristic="value"``: the PRM value of the path (greedy best-first);
- ``heuristic="depth"``: value + ``depth_weight * depth``, an A*-flavoured priority in which
  progress made so far (steps taken) counts as well as the estimated value of what remains, so
  the search does not keep restarting shallow branches (cf. Q*, Wang et al. 2024; the PRM is the
  heuristic).

Each search step pops the ``expansions_per_step`` best nodes of every unfinished prompt, gives
each ``branching`` children in one generate call for all prompts, scores the children in one
scorer call and pushes the unfinished ones. Children that end the solution are collected. A
prompt is done when it has ``n_solutions`` solutions, an empty frontier or ``max_expansions``
expansions. Ties in priority go to the node created first (lowest id). ``trace["order"]`` lists
the expanded node ids in order.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import Select, positive_int
from metagen.strategies.step_config import SelectingStepConfig, samples_per_step
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode
from metagen.types import Result, SamplingParams

Heuristic = Literal["value", "depth"]


def priority(node: SearchNode, heuristic: Heuristic, depth_weight: float) -> float:
    """Priority of a frontier node (higher is expanded first); the root is +inf."""
    if node.parent is None:
        return float("inf")
    value = node.score if node.score is not None else float("-inf")
    return value + depth_weight * node.depth if heuristic == "depth" else value


def best_first(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike, *,
               branching: int = 4,
               max_expansions: int = 16, n_solutions: int = 1, expansions_per_step: int = 1,
               heuristic: Heuristic = "value", depth_weight: float = 0.1, max_depth: int = 16,
               params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
               aggregation: StepAggregation = "last", select: Select = "score",
               answer: Callable[[str], str | None] = default_answer,
               budget: Budget = UNLIMITED) -> list[Result]:
    """Best-first search over a list of prompts; one Result per prompt (see module doc)."""
    positive_int("branching", branching)
    positive_int("max_expansions", max_expansions)
    positive_int("n_solutions", n_solutions)
    positive_int("expansions_per_step", expansions_per_step)
    if heuristic not in ("value", "depth"):
        raise InvalidParameterError("heuristic", heuristic, "must be 'value' or 'depth'")
    if isinstance(depth_weight, bool) or not isinstance(depth_weight, (int, float)):
        raise InvalidParameterError("depth_weight", depth_weight, "must be a number")
    choose_by(select, [])
    search = StepSearch("best_first", generator, prompts, prm, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    frontiers: list[list[tuple[float, int, SearchNode]]] = [
        [(-float("inf"), 0, t.root)] for t in search.trees]
    solutions: list[list[SearchNode]] = [[] for _ in search.trees]
    order: list[list[int]] = [[] for _ in search.trees]
    while True:
        requests: list[tuple[SearchNode, int]] = []
        for i, frontier in enumerate(frontiers):
            if len(solutions[i]) >= n_solutions:
                continue
            for _ in range(expansions_per_step):
                if not frontier or len(order[i]) + sum(
                        1 for n, _ in requests if n.tree == i) >= max_expansions:
                    break
                _, _, node = heapq.heappop(frontier)
                requests.append((node, branching))
        if not requests:
            break
        kids = search.expand(requests)
        if kids is None:
            break
        for node, _ in requests:
            order[node.tree].append(node.id)
        new = [k for ks in kids for k in ks]
        search.score(new)
        for kid in new:
            if kid.terminal:
                solutions[kid.tree].append(kid)
            else:
                heapq.heappush(frontiers[kid.tree],
                               (-priority(kid, heuristic, depth_weight), kid.id, kid))
    return search.results(
        lambda tree, cands: choose_by(select, cands, answer),
        trace={"branching": branching, "heuristic": heuristic, "depth_weight": depth_weight,
               "max_expansions": max_expansions, "select": select},
        per_tree=lambda tree: {"order": order[tree.index]})


@dataclass(frozen=True, slots=True)
class BestFirstConfig(SelectingStepConfig):
    """best_first's parameters besides N (its most expansions)."""

    branching: int | None = param(None, "children per expansion (default min(4, N))", lo=1)
    n_solutions: int = param(1, "finished solutions to find before stopping", lo=1)
    expansions_per_step: int = param(1, "frontier nodes expanded per generate call", lo=1)
    heuristic: Heuristic = param("value", "the frontier's priority: value or depth")
    depth_weight: float = param(0.1, "the depth heuristic's weight per step")


SPEC = StrategySpec("best_first", best_first, "each_n", "best-first (PRM)", BestFirstConfig,
                    scale=lambda n: {"branching": min(4, n), "max_expansions": n},
                    needs=frozenset({"prm"}), scorer_args={"prm": "prm"})
