"""Treefinement: a tree of refinements in which promising attempts get more refinement children
(Aggarwal et al. 2024, "AlphaVerus: Bootstrapping Formally Verified Code Generation through
Self-Improving Translation and Treefinement" — REBASE-style allocation over refinements).

Per prompt, the first round samples ``width`` attempts. Each attempt gets feedback from the
injected source (``feedback(prompt, attempt) -> Feedback``; its ``score``, or 1/0 for ok/not
ok when it has none, is the node's value). Every later round shares ``width`` refinement children
among the previous round's attempts by a softmax of their values at ``temperature``
(:func:`~metagen.strategies.rebase.allocate`); a child's prompt is ``template`` with the parent
attempt and its feedback, or for a chat prompt the conversation ``messages + [assistant:
attempt, user: feedback_turn]`` (as in :func:`~metagen.strategies.refine.refine_with_feedback`).

A prompt stops on **success** (an attempt with ``ok``), on **no progress** (the best value has
not improved for ``patience`` rounds, or a round produced only attempts already in the tree), at
``max_depth`` rounds, or on the **budget**. One generate call per round for all prompts (one per
distinct child count when seeded, see :mod:`metagen.strategies.step_search`). The answer is the
best successful attempt, else the highest-valued one (ties: lowest id). ``trace["tree"]`` holds
every attempt (node ``step`` = the attempt's text, ``info`` = its feedback).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.rebase import allocate
from metagen.strategies.refine import FEEDBACK_TEMPLATE, Feedback, FeedbackFn, RefineRun
from metagen.strategies.refine_prompts import FEEDBACK_TURN, check_turn, feedback_prompt
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.tree import SearchNode, SearchTree
from metagen.types import Completion, Result, SamplingParams


def treefinement(generator: Generator, prompts: Sequence[Prompt], feedback: FeedbackFn, *,
                 width: int = 4, max_depth: int = 4, temperature: float = 0.5,
                 patience: int = 2, template: str = FEEDBACK_TEMPLATE,
                 feedback_turn: str = FEEDBACK_TURN, params: SamplingParams | None = None,
                 budget: Budget = UNLIMITED) -> list[Result]:
    """Treefinement over a list of prompts; one Result per prompt (see module doc)."""
    positive_int("width", width)
    positive_int("max_depth", max_depth)
    positive_int("patience", patience)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not 0 < temperature < math.inf:
        raise InvalidParameterError("temperature", temperature, "must be a positive number")
    for key in ("prompt", "attempt", "feedback"):
        if "{" + key + "}" not in template:
            raise InvalidParameterError("template", template, f"must contain {{{key}}}")
    check_turn("feedback_turn", feedback_turn, "feedback")
    if not callable(feedback):
        raise InvalidParameterError("feedback", feedback, "must be callable(prompt, attempt)")
    run = RefineRun("treefinement", generator, prompts, params, budget)
    trees = run.trees
    frontier: list[list[SearchNode]] = [[t.root] for t in trees]
    status: list[str | None] = [None] * len(trees)
    best: list[float | None] = [None] * len(trees)
    stale = [0] * len(trees)
    completions: dict[tuple[int, int], Completion] = {}
    for depth in range(max_depth):
        requests: list[tuple[SearchNode, int]] = []
        for i, nodes in enumerate(frontier):
            if status[i] is not None or not nodes:
                continue
            counts = [width] if depth == 0 else allocate(
                [n.score or 0.0 for n in nodes], width, float(temperature))
            for n, k in zip(nodes, counts):
                n.info["children_allocated"] = k
                if k:
                    requests.append((n, k))
        if not requests:
            break
        prefixes = [_prompt_for(trees[n.tree], n, template, feedback_turn) for n, _ in requests]
        groups = run.continue_prefixes(prefixes, [k for _, k in requests],
                                       run.params.with_(n=1), [n.tree for n, _ in requests])
        if groups is None:
            break
        run.count_feedback_call()
        frontier = [[] for _ in trees]
        for (node, _), comps in zip(requests, groups):
            for c in comps:
                kid = _attempt(run, trees[node.tree], node, c, feedback, completions)
                if kid is not None and not kid.info.get("budget_cut"):
                    frontier[node.tree].append(kid)
        for i, tree in enumerate(trees):
            if status[i] is not None:
                continue
            _update_status(i, tree, frontier[i], status, best, stale, patience, run)
    return _results(run, completions, status,
                    {"width": width, "temperature": temperature, "patience": patience})


def _prompt_for(tree: SearchTree, node: SearchNode, template: str, turn: str) -> Prompt:
    if node.parent is None:
        return tree.prompt
    return feedback_prompt(tree.prompt, node.step, node.info.get("feedback", ""), template, turn)


def _attempt(run: RefineRun, tree: SearchTree, parent: SearchNode, c: Completion,
             feedback: FeedbackFn, completions: dict[tuple[int, int], Completion]
             ) -> SearchNode | None:
    if c.finish_reason == "error":
        run.failures[tree.index]["generation_error"] += 1
        return None
    kid = tree.add(parent, c.text, tokens=c.num_tokens, token_ids=tuple(c.token_ids),
                   logprob=c.cumulative_logprob, finish_reason=c.finish_reason)
    completions[(tree.index, kid.id)] = c
    if run.cut_by_budget(c):
        kid.info["budget_cut"] = True
        return kid
    fb = feedback(tree.prompt, c.text)
    if not isinstance(fb, Feedback):
        raise InvalidParameterError("feedback", fb, "must return a Feedback")
    kid.score = fb.score if fb.score is not None else float(fb.ok)
    kid.terminal = fb.ok
    kid.info.update(feedback=fb.message, ok=fb.ok)
    return kid


def _update_status(i: int, tree: SearchTree, new: list[SearchNode], status: list[str | None],
                   best: list[float | None], stale: list[int], patience: int,
                   run: RefineRun) -> None:
    if any(n.terminal for n in new):
        status[i] = "success"
        return
    if run.stopped_by_budget:
        status[i] = "budget"
        return
    seen = [n.step for n in tree.root.walk() if n not in new and n.parent is not None]
    scores = [n.score for n in new if n.score is not None]
    top = max(scores) if scores else None
    previous = best[i]
    if top is not None and (previous is None or top > previous):
        best[i], stale[i] = top, 0
    else:
        stale[i] += 1
    if (new and all(n.step in seen for n in new)) or stale[i] >= patience:
        status[i] = "no_progress"


def _results(run: RefineRun, completions: dict[tuple[int, int], Completion],
             status: list[str | None], trace: dict[str, Any]) -> list[Result]:
    total = run.usage()
    out = []
    usages = run.prompt_usages([t.generated_tokens() for t in run.trees])
    for tree, usage in zip(run.trees, usages):
        nodes = sorted((n for n in tree.root.walk() if n.parent is not None), key=lambda n: n.id)
        ok = [n for n in nodes if n.terminal]
        pool = ok or [n for n in nodes if n.score is not None] or nodes
        choice = min(pool, key=lambda n: (-(n.score if n.score is not None else -math.inf),
                                          n.id)) if pool else None
        reason = status[tree.index] or ("budget" if run.stopped_by_budget else "max_depth")
        info = {"strategy": "treefinement", "tree": tree.to_dict(), "stop_reason": reason,
                "best_id": None if choice is None else choice.id,
                "batch_usage": total.to_dict(), "batch_size": len(run.trees)}
        info.update(trace)
        out.append(Result(
            best=None if choice is None else completions[(tree.index, choice.id)],
            candidates=[completions[(tree.index, n.id)] for n in nodes],
            scores=[n.score for n in nodes], usage=usage, trace=info,
            stopped_by_budget=reason == "budget", failures=dict(run.failures[tree.index])))
    return out


@dataclass(frozen=True, slots=True)
class TreefinementConfig:
    """treefinement's parameters besides N (its attempts: width x depth)."""

    width: int | None = param(None, "children per refined attempt (default min(4, N))", lo=1)
    max_depth: int | None = param(None, "refinement rounds (default N // width)", lo=1)
    temperature: float = param(0.5, "REBASE's temperature over attempt rewards", lo=0.0,
                               lo_open=True)
    patience: int = param(2, "rounds without improvement before stopping", lo=1)


def _scale(n: int) -> dict[str, int]:
    width = min(4, n)
    return {"width": width, "max_depth": max(1, n // width)}


_NO_TASK = "needs a feedback function (a task's checks, e.g. executed unit tests)"
SPEC = StrategySpec("treefinement", treefinement, "refinement", "treefinement",
                    TreefinementConfig, scale=_scale, needs=frozenset({"feedback"}),
                    scorer_args={"feedback": "feedback"},
                    not_on={"serve": _NO_TASK, "cli": _NO_TASK})
