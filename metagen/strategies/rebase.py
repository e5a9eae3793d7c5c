"""REBASE — reward-balanced search (Wu et al. 2024, "Inference Scaling Laws: An Empirical
Analysis of Compute-Optimal Inference for Problem-Solving with Language Models").

Per prompt, a sampling budget of ``width`` solutions. The root gets ``width`` first steps. At
every later depth the unfinished nodes of the frontier share the budget that is left,
``B = width - finished``, in proportion to a softmax of their PRM value at ``temperature``:
node ``j`` gets ``w_j = B * softmax(r / T)_j`` children, rounded by largest remainder so the
counts sum to exactly ``B`` (Wu et al. round each share; exact sums make budgets comparable).
Nodes given 0 children are pruned. The search ends when ``width`` solutions are finished, the
frontier is empty, or ``max_depth`` is reached; the answer is chosen among the finished solutions
(highest value, vote or value-weighted vote — Wu et al. use weighted voting).

All frontier nodes of all prompts are expanded in one generate call per depth. Because the
nodes ask for different numbers of children, the call sends each prefix once per child with
``n=1``; with a fixed ``seed`` it makes one call per distinct child count instead (see
:mod:`metagen.strategies.step_search`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import Select, positive_int
from metagen.strategies.step_config import SelectingStepConfig
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode
from metagen.types import Result, SamplingParams


def allocate(rewards: Sequence[float], budget: int, temperature: float) -> list[int]:
    """Children per node: ``budget * softmax(rewards / temperature)`` rounded by largest
    remainder (ties to the lower index), summing to exactly ``budget``."""
    if not rewards or budget <= 0:
        return [0] * len(rewards)
    top = max(rewards)
    ex = [math.exp((r - top) / temperature) for r in rewards]
    raw = [budget * e / sum(ex) for e in ex]
    out = [math.floor(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: (-(raw[i] - out[i]), i))
    for i in order[: budget - sum(out)]:
        out[i] += 1
    return out


def rebase(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike, *,
           width: int = 16, temperature: float = 0.2, max_depth: int = 16,
           params: SamplingParams | None = None,
           steps: StepDefinition = DEFAULT_STEPS, aggregation: StepAggregation = "last",
           select: Select = "weighted_vote",
           answer: Callable[[str], str | None] = default_answer,
           budget: Budget = UNLIMITED) -> list[Result]:
    """REBASE over a list of prompts; one Result per prompt (see module doc).

    ``trace["allocations"]`` lists, per depth, ``[node id, children]`` pairs.
    """
    positive_int("width", width)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not 0 < temperature < math.inf:
        raise InvalidParameterError("temperature", temperature, "must be a positive number")
    choose_by(select, [])
    search = StepSearch("rebase", generator, prompts, prm, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    frontier: list[list[SearchNode]] = [[t.root] for t in search.trees]
    finished = [0] * len(search.trees)
    allocations: list[list[list[list[int]]]] = [[] for _ in search.trees]
    while True:
        requests: list[tuple[SearchNode, int]] = []
        for i, nodes in enumerate(frontier):
            left = width - finished[i]
            if not nodes or left <= 0:
                continue
            if nodes == [search.trees[i].root]:
                counts = [left]
            else:
                counts = allocate([n.score or 0.0 for n in nodes], left, float(temperature))
            allocations[i].append([[n.id, k] for n, k in zip(nodes, counts)])
            for n, k in zip(nodes, counts):
                if k == 0:
                    n.pruned = True
                else:
                    requests.append((n, k))
        if not requests:
            break
        kids = search.expand(requests)
        if kids is None:
            break
        new = [k for ks in kids for k in ks]
        search.score(new)
        frontier = [[] for _ in search.trees]
        for kid in new:
            if kid.terminal:
                finished[kid.tree] += 1
            else:
                frontier[kid.tree].append(kid)
    return search.results(
        lambda tree, cands: choose_by(select, cands, answer),
        trace={"width": width, "temperature": temperature, "select": select},
        per_tree=lambda t: {"allocations": allocations[t.index]})


@dataclass(frozen=True, slots=True)
class RebaseConfig(SelectingStepConfig):
    """rebase's parameters besides N (its width: samples per step)."""

    temperature: float = param(0.2, "the softmax temperature over node rewards", lo=0.0,
                               lo_open=True)


SPEC = StrategySpec("rebase", rebase, "each_n", "REBASE (PRM)", RebaseConfig,
                    scale=lambda n: {"width": n}, needs=frozenset({"prm"}),
                    scorer_args={"prm": "prm"})
