"""Tree of Thoughts (Yao et al. 2023, "Tree of Thoughts: Deliberate Problem Solving with Large
Language Models"): breadth-first and depth-first search over steps ("thoughts") with a value
function, value-threshold pruning and backtracking.

- ``mode="bfs"``: each search step gives every kept state ``branching`` children, values them,
  drops those below ``threshold`` and keeps the ``breadth`` best (Yao et al.'s BFS; the same
  machinery as :func:`~metagen.strategies.step_beam.step_beam_search`).
- ``mode="dfs"``: per prompt a stack; the top state gets ``branching`` children, the children
  valued at least ``threshold`` are pushed best-on-top (the others are pruned), and the next state
  is popped. When all children of a state are pruned the search backtracks to the most recent
  unexplored sibling of an ancestor. It ends at ``n_solutions`` solutions, an empty stack or
  ``max_expansions`` expansions. ``trace["order"]`` lists the expanded ids, ``trace["backtracks"]``
  counts the expansions that did not continue the previous one.

The value function is any step scorer: a PRM, or :class:`LMStepValue`, the model itself judging
the partial solution (Yao et al.'s value prompt), through ``generator.score``. All prompts
advance together: one generate call and one value call per search step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError, MetagenError
from metagen.generators.base import Generator, Prompt, ScoringGenerator, require
from metagen.scorers.base import ProcessRewardLike, StepAggregation, text_only
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import Select, positive_int, rank_key, run_beams
from metagen.strategies.step_config import SelectingStepConfig, samples_per_step
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode
from metagen.types import Result, SamplingParams, Usage

DEFAULT_VALUE_TEMPLATE = "{prompt}{steps}\nIs every step above correct? Answer:"


class LMStepValue:
    """A step scorer from an LM judge: value = P(yes) / (P(yes) + P(no)) of the answer to
    ``template`` (filled with ``prompt`` and the concatenated ``steps``), from the log-likelihoods
    ``generator.score`` gives to ``yes`` and ``no``. One value per path (its last step).

    Needs the ``prompt_scoring`` capability (raises ``CapabilityError`` at construction). Its
    ``usage`` sums what its ``score`` calls added to the judge generator's usage (or one
    ``scorer_calls`` per call when the judge keeps no usage). A search whose generator *is* the
    judge finds these already in the generator's usage and does not add them twice.
    """

    def __init__(self, generator: ScoringGenerator, template: str = DEFAULT_VALUE_TEMPLATE,
                 yes: str = " Yes", no: str = " No") -> None:
        require(generator, "prompt_scoring", why="LMStepValue scores ' Yes' / ' No'")
        if "{steps}" not in template:
            raise InvalidParameterError("template", template, "must contain {steps}")
        self.generator = generator
        self.template = template
        self.yes, self.no = yes, no
        self._usage = Usage()

    @property
    def usage(self) -> Usage:
        return self._usage

    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        """One value per path; a chat prompt raises ``InvalidPromptError`` naming ``prompts``
        (the value template is text)."""
        judged = [self.template.format(prompt=p, steps="".join(s))
                  for p, s in zip(text_only(prompts, "LMStepValue"), steps)]
        before = getattr(self.generator, "usage", None)
        rows = self.generator.score(judged, [[self.yes, self.no]] * len(judged))
        after = getattr(self.generator, "usage", None)
        if isinstance(before, Usage) and isinstance(after, Usage):
            self._usage = self._usage + (after - before)
        else:
            self._usage = self._usage + Usage(scorer_calls=1)
        out = []
        for row in rows:
            if len(row) != 2 or not all(math.isfinite(x) for x in row):
                raise MetagenError(f"judge scores {row!r} are not two finite log-likelihoods")
            out.append([1.0 / (1.0 + math.exp(row[1] - row[0]))])
        return out


def tree_of_thoughts(generator: Generator, prompts: Sequence[Prompt], value: ProcessRewardLike, *,
                     mode: Literal["bfs", "dfs"] = "bfs", branching: int = 4, breadth: int = 2,
                     threshold: float | None = None, max_expansions: int = 32,
                     n_solutions: int = 1, max_depth: int = 16,
                     params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
                     aggregation: StepAggregation = "last", select: Select = "score",
                     answer: Callable[[str], str | None] = default_answer,
                     budget: Budget = UNLIMITED) -> list[Result]:
    """ToT BFS or DFS over a list of prompts; one Result per prompt (see module doc).

    ``breadth`` is BFS's number of kept states; ``max_expansions`` and ``n_solutions`` bound
    DFS. ``threshold`` (values below it are pruned) applies to both.
    """
    if mode not in ("bfs", "dfs"):
        raise InvalidParameterError("mode", mode, "must be 'bfs' or 'dfs'")
    positive_int("branching", branching)
    positive_int("breadth", breadth)
    positive_int("max_expansions", max_expansions)
    positive_int("n_solutions", n_solutions)
    if threshold is not None and (isinstance(threshold, bool)
                                  or not isinstance(threshold, (int, float))):
        raise InvalidParameterError("threshold", threshold, "must be a number or None")
    choose_by(select, [])
    search = StepSearch(f"tot_{mode}", generator, prompts, value, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    trace = {"mode": mode, "branching": branching, "breadth": breadth, "threshold": threshold,
             "select": select}
    choose = lambda tree, cands: choose_by(select, cands, answer)  # noqa: E731
    unpruned = lambda tree: [n for n in tree.terminal_leaves() if not n.pruned]  # noqa: E731
    if mode == "bfs":
        run_beams(search, 1, breadth, branching, threshold=threshold)
        return search.results(choose, trace=trace, candidates=unpruned)
    order, backtracks = _dfs(search, branching, threshold, max_expansions, n_solutions)
    return search.results(choose, trace=trace, candidates=unpruned,
                          per_tree=lambda t: {"order": order[t.index],
                                              "backtracks": backtracks[t.index]})


def _dfs(search: StepSearch, branching: int, threshold: float | None, max_expansions: int,
         n_solutions: int) -> tuple[list[list[int]], list[int]]:
    stacks: list[list[SearchNode]] = [[t.root] for t in search.trees]
    solutions = [0] * len(search.trees)
    order: list[list[int]] = [[] for _ in search.trees]
    backtracks = [0] * len(search.trees)
    while True:
        requests = []
        for i, stack in enumerate(stacks):
            if stack and solutions[i] < n_solutions and len(order[i]) < max_expansions:
                requests.append((stack[-1], branching))
        if not requests:
            break
        kids = search.expand(requests)
        if kids is None:
            break
        search.score([k for ks in kids for k in ks])
        for (node, _), ks in zip(requests, kids):
            i = node.tree
            stacks[i].pop()
            if order[i] and node.parent is not None and node.parent.id != order[i][-1]:
                backtracks[i] += 1
            order[i].append(node.id)
            ranked = sorted(ks, key=rank_key)
            for k in ranked:
                if threshold is not None and -rank_key(k)[0] < threshold:
                    k.pruned = True
            kept = [k for k in ranked if not k.pruned]
            solutions[i] += sum(1 for k in kept if k.terminal)
            stacks[i].extend(reversed([k for k in kept if not k.terminal]))
    return order, backtracks


@dataclass(frozen=True, slots=True)
class ToTConfig(SelectingStepConfig):
    """tree_of_thoughts's parameters besides N (its most expansions)."""

    mode: Literal["bfs", "dfs"] = param("bfs", "breadth-first (beam) or depth-first")
    branching: int | None = param(None, "thoughts per expansion (default min(4, N))", lo=1)
    breadth: int | None = param(None, "states kept per level (bfs; default N // 4)", lo=1)
    threshold: float | None = param(None, "dfs prunes states valued below it")
    n_solutions: int = param(1, "finished solutions to find before stopping (dfs)", lo=1)


def _scale(n: int) -> dict[str, int]:
    return {"branching": min(4, n), "breadth": max(1, n // 4), "max_expansions": n}


SPEC = StrategySpec("tree_of_thoughts", tree_of_thoughts, "each_n", "tree of thoughts (PRM)",
                    ToTConfig, scale=_scale, needs=frozenset({"prm"}),
                    scorer_args={"prm": "value"})
