"""First Finish Search (Agarwal et al. 2025, "First Finish Search: Efficient Test-Time Scaling in
Large Language Models"): start ``n`` traces of a prompt in parallel and return the first one to
finish; the others are stopped at that moment, so the run costs about ``n`` times the winner's
length instead of ``n`` whole traces. Shorter traces are, for reasoning models, more often right.

The traces advance one *step* per round (a step ends at ``steps.stop``, a newline by default), one
batched ``generate`` call for every live trace of every prompt, continuing ``prompt + steps so
far`` as the step searches do (so the backend's prefix cache serves each trace's past). A trace
finishes when a step completes its solution (the final marker, or the end of text); among the
traces of a prompt that finish in the same round the one with the fewest generated tokens wins
(ties: the lowest id), which is the first to finish at token granularity; a trace cut by a
step's token cap (no stop string: the step searches' end of a solution), by ``max_depth`` or by
the budget has not finished and stops. A prompt none of whose traces finish falls back to the
shortest of them (``trace["finished"]`` is then False).

Contracts: seeds, budgets, failed samples and usage accounting are those of
:class:`~metagen.strategies.step_search.StepSearch` (a failed sample ends its trace and is
counted in ``Result.failures``). ``Result.candidates`` are every trace as it stood when the
search stopped (the winner and the stopped ones); ``trace`` adds ``finished``, ``rounds`` and
``winner_tokens``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from metagen.generators.base import Generator, Prompt
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.step_search import StepSearch
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode, SearchTree
from metagen.types import Result, SamplingParams


def path_tokens(node: SearchNode) -> int:
    """Tokens generated along ``node``'s path."""
    return sum(n.tokens for n in node.path())


def first_to_finish(nodes: Sequence[SearchNode], steps: StepDefinition) -> SearchNode | None:
    """The finished node with the fewest path tokens (ties: the lowest id); None when none
    finished. Finished: its step completes the solution (``steps.final``) or the text ended
    (finish reason ``stop``); a trace cut by a step's token cap, ``max_depth`` or the budget
    has not finished."""
    done = [k for k in nodes if k.terminal and (k.finish_reason == "stop" or steps.final(k.step))
            and not k.info.get("max_depth") and not k.info.get("budget_cut")]
    return min(done, key=lambda k: (path_tokens(k), k.id)) if done else None


def first_finish(generator: Generator, prompts: Sequence[Prompt], *, n: int = 8,
                 max_depth: int = 16, params: SamplingParams | None = None,
                 steps: StepDefinition = DEFAULT_STEPS, budget: Budget = UNLIMITED
                 ) -> list[Result]:
    """First Finish Search over a list of prompts: ``n`` traces each, the first to finish
    wins (see the module docstring); one Result per prompt."""
    positive_int("n", n)
    search = StepSearch("first_finish", generator, prompts, None, params=params, steps=steps,
                        budget=budget, max_depth=max_depth)
    winners: dict[int, SearchNode] = {}
    requests: list[tuple[SearchNode, int]] = [(tree.root, n) for tree in search.trees]
    while requests and not search.stopped_by_budget:
        grown = search.expand(requests)
        if grown is None:
            break
        live: list[tuple[SearchNode, int]] = []
        for tree in search.trees:
            kids = [k for (node, _), group in zip(requests, grown) if node.tree == tree.index
                    for k in group]
            winner = first_to_finish(kids, steps)
            if winner is not None:
                winners[tree.index] = winner
            elif tree.index not in winners:
                live += [(k, 1) for k in kids if not k.terminal]
        requests = live
    return search.results(
        choose=lambda tree, cands: winners.get(tree.index) or _shortest(cands),
        candidates=_traces,
        per_tree=lambda tree: {"finished": tree.index in winners, "rounds": search.search_step,
                               "winner_tokens": path_tokens(w) if (w := winners.get(
                                   tree.index)) is not None else None})


def _traces(tree: SearchTree) -> list[SearchNode]:
    return sorted((k for k in tree.root.walk() if k.is_leaf and k.parent is not None),
                  key=lambda k: k.id)


def _shortest(nodes: Sequence[SearchNode]) -> SearchNode | None:
    return min(nodes, key=lambda k: (path_tokens(k), k.id)) if nodes else None


@dataclass(frozen=True, slots=True)
class FirstFinishConfig:
    """first_finish's parameters besides N (its parallel traces)."""

    max_depth: int = param(16, "most steps in a trace", lo=1)


SPEC = StrategySpec("first_finish", first_finish, "each_n", "first finish", FirstFinishConfig)
