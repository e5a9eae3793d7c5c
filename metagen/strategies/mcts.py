"""Monte-Carlo tree search over reasoning steps (Kocsis & Szepesvári 2006 UCT; Silver et al. 2017
PUCT; for LLM reasoning e.g. Hao et al. 2023 RAP, Zhang et al. 2024 ReST-MCTS*).

One iteration, for all prompts at once:

1. **Selection** — from the root, repeatedly take the child with the highest UCT
   ``Q + c * sqrt(ln N_parent / N_child)`` or PUCT ``Q + c * P * sqrt(N_parent) / (1 + N_child)``
   until a node without children or a terminal node (ties: lowest id). The prior ``P`` is a
   softmax over siblings of their mean token log-probability when the backend returns
   log-probabilities, else uniform.
2. **Expansion** — the selected unfinished leaf gets ``branching`` sampled next steps (one
   generate call for the selected leaves of all prompts). A terminal node is not expanded; its
   value is backed up again.
3. **Evaluation** — each new child is valued by the PRM (``"prm"``, one scorer call), by a
   rollout to the end of the solution (``"rollout"``: one generate call for all new unfinished
   children, valued by ``reward(prompt, text)`` when given, else by the PRM on the completed
   path), or by ``(1 - mix) * prm + mix * rollout`` (``"mixed"``). The value is the node's
   ``score``; rollout texts go to ``info["rollout"]`` and do not enter the tree.
4. **Backup** — every new child starts with one visit and its value; its ancestors add them.

The final choice follows the most visited (``"visits"``) or highest-valued (``"value"``) child
from the root down; when that path does not end in a finished solution, the finished solution
with the highest mean value is returned. ``"vote"`` takes a majority over the answers of all
finished solutions. Candidates are all finished solutions, with their evaluation as score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation, aggregate_steps
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.step_config import StepConfig
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode, SearchTree
from metagen.types import Result, SamplingParams

Selection = Literal["uct", "puct"]
Evaluation = Literal["prm", "rollout", "mixed"]
FinalChoice = Literal["visits", "value", "vote"]


def uct(child: SearchNode, parent_visits: int, c: float) -> float:
    """UCT score; an unvisited child is +inf."""
    if child.visits == 0:
        return float("inf")
    return child.q + c * math.sqrt(math.log(max(parent_visits, 1)) / child.visits)


def puct(child: SearchNode, parent_visits: int, c: float) -> float:
    """PUCT score (AlphaZero): ``Q + c * P * sqrt(N_parent) / (1 + N_child)``."""
    return child.q + c * child.prior * math.sqrt(parent_visits) / (1 + child.visits)


def softmax_priors(logprobs: Sequence[float | None], tokens: Sequence[int]) -> list[float]:
    """Priors from mean token log-probabilities (uniform when any is missing)."""
    k = len(logprobs)
    if k == 0:
        return []
    known = [lp for lp in logprobs if lp is not None]
    if len(known) != k:
        return [1.0 / k] * k
    means = [lp / max(t, 1) for lp, t in zip(known, tokens)]
    top = max(means)
    ex = [math.exp(m - top) for m in means]
    return [e / sum(ex) for e in ex]


def select_leaf(root: SearchNode, selection: Selection, c: float) -> SearchNode:
    """Descend from ``root`` by UCT/PUCT to a node without children or a terminal node."""
    rule = uct if selection == "uct" else puct
    node = root
    while node.children and not node.terminal:
        node = min(node.children, key=lambda ch: (-rule(ch, node.visits, c), ch.id))
    return node


def select_leaves(root: SearchNode, selection: Selection, c: float, k: int) -> list[SearchNode]:
    """Up to ``k`` distinct leaves for one batched iteration (parallel MCTS, Chaslot et al.
    2008): after each selection a virtual loss (one visit of value 0 along its path) steers the
    next one elsewhere; the virtual losses are removed before returning. A leaf selected twice
    ends the selection."""
    chosen: list[SearchNode] = []
    for _ in range(k):
        leaf = select_leaf(root, selection, c)
        if any(leaf is x for x in chosen):
            break
        chosen.append(leaf)
        backup(leaf, 0.0)
    for leaf in chosen:
        cur: SearchNode | None = leaf
        while cur is not None:
            cur.visits -= 1
            cur = cur.parent
    return chosen


def backup(node: SearchNode, value: float) -> None:
    """Add one visit with ``value`` to ``node`` and every ancestor."""
    cur: SearchNode | None = node
    while cur is not None:
        cur.visits += 1
        cur.value_sum += value
        cur = cur.parent


def mcts(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike | None, *,
         iterations: int = 16,
         branching: int = 4, c: float = 1.0, selection: Selection = "uct",
         evaluation: Evaluation = "prm", mix: float = 0.5,
         reward: Callable[[Prompt, str], float] | None = None, rollout_max_tokens: int = 256,
         final: FinalChoice = "visits", complete: bool = True, parallel: int = 1,
         max_depth: int = 16,
         params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
         aggregation: StepAggregation = "last",
         answer: Callable[[str], str | None] = default_answer,
         budget: Budget = UNLIMITED) -> list[Result]:
    """MCTS over a list of prompts; one Result per prompt (see module doc).

    ``parallel`` leaves per prompt are selected in each iteration (with a virtual loss, so they
    differ) and expanded in the same call. ``prm`` may be ``None`` only with
    ``evaluation="rollout"`` and a ``reward``. With
    ``complete`` (default), a prompt whose search found no finished solution gets one rollout
    from the node the final choice reaches (one call for all such prompts, within the budget);
    its steps enter the tree as a chain marked ``info["completion"]`` and are scored. Raises
    ``InvalidParameterError`` for bad options before any model call.
    """
    positive_int("iterations", iterations)
    positive_int("branching", branching)
    positive_int("rollout_max_tokens", rollout_max_tokens)
    positive_int("parallel", parallel)
    if selection not in ("uct", "puct"):
        raise InvalidParameterError("selection", selection, "must be 'uct' or 'puct'")
    if evaluation not in ("prm", "rollout", "mixed"):
        raise InvalidParameterError("evaluation", evaluation, "must be prm, rollout or mixed")
    if final not in ("visits", "value", "vote"):
        raise InvalidParameterError("final", final, "must be visits, value or vote")
    for name, v, lo in (("c", c, 0.0), ("mix", mix, 0.0)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v < math.inf:
            raise InvalidParameterError(name, v, "must be a finite number >= 0")
    if mix > 1:
        raise InvalidParameterError("mix", mix, "must be in [0, 1]")
    if prm is None and (evaluation != "rollout" or reward is None):
        raise InvalidParameterError("prm", prm, "needed unless evaluation='rollout' with reward")
    search = StepSearch("mcts", generator, prompts, prm, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    order: list[list[int]] = [[] for _ in search.trees]
    for _ in range(iterations):
        leaves = [leaf for t in search.trees for leaf in select_leaves(t.root, selection, c,
                                                                       parallel)]
        for leaf in leaves:
            if leaf.terminal:
                backup(leaf, leaf.score if leaf.score is not None else 0.0)
        todo = [leaf for leaf in leaves if not leaf.terminal]
        if not todo:
            continue
        kids = search.expand([(leaf, branching) for leaf in todo])
        if kids is None:
            break
        for leaf, ks in zip(todo, kids):
            order[leaf.tree].append(leaf.id)
            for k, p in zip(ks, softmax_priors([k.logprob for k in ks], [k.tokens for k in ks])):
                k.prior = p
        new = [k for ks in kids for k in ks]
        if not _evaluate(search, new, evaluation, mix, reward, rollout_max_tokens):
            break
        for k in new:
            backup(k, k.score if k.score is not None else 0.0)
    if complete:
        _complete(search, final, rollout_max_tokens, reward)
    choose = lambda tree, cands: _final(tree, cands, final, answer)  # noqa: E731
    return search.results(choose, trace={
        "iterations": iterations, "branching": branching, "c": c, "selection": selection,
        "evaluation": evaluation, "final": final}, per_tree=lambda t: {"order": order[t.index]})


def _evaluate(search: StepSearch, nodes: list[SearchNode], evaluation: Evaluation, mix: float,
              reward: Callable[[Prompt, str], float] | None, max_tokens: int) -> bool:
    """Set each node's ``score`` to its evaluation; False when the budget stopped a rollout."""
    if evaluation in ("prm", "mixed"):
        search.score(nodes)
    elif reward is None:  # rollout valued by the PRM: finished children need only their own
        search.score([n for n in nodes if n.terminal])
    if evaluation == "prm":
        return True
    open_ = [n for n in nodes if not n.terminal]
    outs = search.rollout(open_, search.params, max_tokens)
    if outs is None:
        return False
    values: dict[int, float | None] = {}  # a missing or None value: no rollout value
    tree_of: Callable[[SearchNode], SearchTree] = lambda n: search.trees[n.tree]  # noqa: E731
    if reward is not None:
        for n in nodes:
            text = n.text()
            if not n.terminal:
                out = outs[open_.index(n)]
                if out is None:
                    continue
                text += out.text
                n.info["rollout"] = out.text
            values[n.id] = float(reward(tree_of(n).prompt, text))
    else:
        done = [(n, o) for n, o in zip(open_, outs) if o is not None]
        rows = search.score_paths([(n, search.steps.split(o.text)) for n, o in done])
        for (n, o), row in zip(done, rows):
            n.info["rollout"] = o.text
            values[n.id] = aggregate_steps(row, search.aggregation)
        for n in nodes:
            if n.terminal:
                values[n.id] = n.score
    for n in nodes:
        prm_value = n.score
        roll = values.get(n.id)
        if evaluation == "rollout":
            n.score = roll
        elif roll is not None and prm_value is not None:
            n.score = (1 - mix) * prm_value + mix * roll
        if roll is not None:
            n.info["rollout_value"] = roll
    return True


def descend(root: SearchNode, final: FinalChoice) -> SearchNode:
    """Follow the most visited (``"visits"``, ties: higher value, lower id) or highest-valued
    visited child (``"value"``; an unvisited completion chain is followed as is) to a leaf."""
    node = root
    while node.children:
        if final == "value":
            node = min((ch for ch in node.children if ch.visits), default=None,
                       key=lambda ch: (-ch.q, ch.id)) or node.children[0]
        else:
            node = min(node.children, key=lambda ch: (-ch.visits, -ch.q, ch.id))
    return node


def _final(tree: SearchTree, cands: list[SearchNode], final: FinalChoice,
           answer: Callable[[str], str | None]) -> SearchNode | None:
    if final == "vote":
        return choose_by("vote", cands, answer)
    node = descend(tree.root, final)
    if node.terminal and node in cands:
        return node
    value = lambda n: n.q if n.visits else (n.score or 0.0)  # noqa: E731
    return min(cands, key=lambda n: (-value(n), n.id)) if cands else None


def _complete(search: StepSearch, final: FinalChoice, max_tokens: int,
              reward: Callable[[Prompt, str], float] | None) -> None:
    """Roll out the chosen path of every tree without a finished solution (one call)."""
    ends = [descend(t.root, final) for t in search.trees if not t.terminal_leaves()]
    outs = search.rollout(ends, search.params, max_tokens) if ends else None
    if not outs:
        return
    chain_ends = []
    for end, out in zip(ends, outs):
        if out is None:
            continue
        end.extra_tokens -= out.num_tokens  # the tokens belong to the new chain
        tree = search.trees[end.tree]
        node = end
        for j, part in enumerate(search.steps.split(out.text) or [out.text]):
            node = tree.add(node, part, finish_reason=out.finish_reason)
            node.info["completion"] = True
            if j == 0:
                node.tokens, node.token_ids = out.num_tokens, tuple(out.token_ids)
                node.logprob = out.cumulative_logprob
        node.terminal = True
        chain_ends.append(node)
    if search.has_step_scorer:
        search.score(chain_ends)
    elif reward is not None:
        for n in chain_ends:
            n.score = float(reward(search.trees[n.tree].prompt, n.text()))


@dataclass(frozen=True, slots=True)
class MCTSConfig(StepConfig):
    """mcts's parameters besides N (its iterations)."""

    branching: int | None = param(None, "children per expansion (default min(4, N))", lo=1)
    c: float = param(1.0, "the exploration constant", lo=0.0)
    selection: Selection = param("uct", "uct or puct (priors from the step logprobs)")
    evaluation: Evaluation = param("prm", "a leaf's value: prm, rollout or mixed")
    mix: float = param(0.5, "mixed evaluation's PRM weight", lo=0.0, hi=1.0)
    rollout_max_tokens: int = param(256, "tokens of a rollout", lo=1)
    final: FinalChoice = param("visits", "the answer: most visits, best value or a vote")
    complete: bool = param(True, "finish the chosen path when it is unfinished")
    parallel: int = param(1, "leaves selected per iteration (virtual loss)", lo=1)


SPEC = StrategySpec("mcts", mcts, "each_n", "MCTS (PRM)", MCTSConfig,
                    scale=lambda n: {"branching": min(4, n), "iterations": n},
                    needs=frozenset({"prm"}), scorer_args={"prm": "prm"})
