"""Step-level beam search guided by a process reward model (Snell et al. 2024, "Scaling LLM
Test-Time Compute Optimally..."; Yao et al. 2023's beam variant of ToT), with optional lookahead.

Per prompt the beam keeps ``width`` partial solutions. The first search step samples
``width * branching`` first steps from the prompt; every later step gives each live beam
``branching`` children. All new children are scored by the PRM (one batched call); children that
end the solution leave the beam as finished candidates (as in search-and-learn), and the ``width``
best unfinished children (by PRM value, or by lookahead value) form the next beam; the rest are
pruned. A prompt's search ends when it has ``width`` finished candidates, no live beam, or
``max_depth`` steps. Lookahead ``k`` (Snell et al. §5) extends each unfinished child by up to
``k`` greedy steps, scores the extended path, and ranks the child by that value; the lookahead
text is discarded (its tokens are counted). Every search step is one generate call for all live
beams of all prompts, plus one per lookahead step; beams of different prompts never compete.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation, aggregate_steps
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_config import SelectingStepConfig, samples_per_step
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.step_select import Select
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode
from metagen.types import Result, SamplingParams



def positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(name, value, f"must be an integer >= {minimum}")
    return value


@dataclass(slots=True)
class _Beam:
    """One independent beam: all of a prompt's beams (beam search) or one DVTS subtree."""

    root: SearchNode
    group: int
    live: list[SearchNode] = field(default_factory=list)
    finished: list[SearchNode] = field(default_factory=list)
    started: bool = False
    done: bool = False


def rank_key(node: SearchNode) -> tuple[float, int]:
    """Sort key: higher (lookahead) value first, then lower id."""
    value = node.info.get("lookahead_score", node.score)
    return (-(value if value is not None else float("-inf")), node.id)


def run_beams(search: StepSearch, groups: int, width: int, branching: int,
              lookahead: int = 0, threshold: float | None = None) -> None:
    """Drive ``groups`` independent beams of ``width`` per prompt until each is done.

    With ``threshold``, children valued below it are pruned, finished or not (ToT pruning).
    """
    beams = [_Beam(t.root, g) for t in search.trees for g in range(groups)]
    while True:
        active = [b for b in beams if not b.done]
        if not active:
            return
        requests: list[tuple[SearchNode, int]] = []
        tags: list[int] = []
        owner: list[_Beam] = []
        for b in active:
            parents = [(b.root, width * branching)] if not b.started else \
                [(n, branching) for n in b.live]
            for node, count in parents:
                requests.append((node, count))
                tags.append(b.group)
                owner.append(b)
        kids = search.expand(requests, tags=tags)
        if kids is None:
            return
        new = [k for ks in kids for k in ks]
        search.score(new)
        if lookahead:
            if not _lookahead(search, [k for k in new if not k.terminal], lookahead):
                return
        per_beam: dict[int, list[SearchNode]] = {}
        for b, ks in zip(owner, kids):
            per_beam.setdefault(id(b), []).extend(ks)
        for b in active:
            b.started = True
            cands = per_beam.get(id(b), [])
            if threshold is not None:
                for k in cands:
                    if -rank_key(k)[0] < threshold:
                        k.pruned = True
                cands = [k for k in cands if not k.pruned]
            b.finished.extend(k for k in cands if k.terminal)
            open_ = sorted((k for k in cands if not k.terminal), key=rank_key)
            b.live = open_[:width]
            for k in open_[width:]:
                k.pruned = True
            b.done = len(b.finished) >= width or not b.live


def _lookahead(search: StepSearch, nodes: list[SearchNode], depth: int) -> bool:
    """Greedy lookahead of up to ``depth`` steps; False when the budget stopped it."""
    greedy = search.params.with_(temperature=0.0, n=1, seed=None)
    extra: dict[int, list[str]] = {id(n): [] for n in nodes}
    open_ = list(nodes)
    for _ in range(depth):
        if not open_:
            break
        outs = search.continue_steps([(n, extra[id(n)]) for n in open_], greedy)
        if outs is None:
            return False
        still = []
        for node, out in zip(open_, outs):
            if out is None:
                continue
            step, final, tokens = out
            extra[id(node)].append(step)
            node.extra_tokens += tokens
            if not final and node.depth + len(extra[id(node)]) < search.max_depth:
                still.append(node)
        open_ = still
    rows = search.score_paths([(n, extra[id(n)]) for n in nodes])
    for node, row in zip(nodes, rows):
        node.info["lookahead_score"] = aggregate_steps(row, search.aggregation)
        node.info["lookahead_steps"] = len(extra[id(node)])
    return True


def step_beam_search(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike, *,
                     width: int = 4,
                     branching: int = 4, max_depth: int = 16, lookahead: int = 0,
                     params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
                     aggregation: StepAggregation = "last", select: Select = "score",
                     answer: Callable[[str], str | None] = default_answer,
                     budget: Budget = UNLIMITED) -> list[Result]:
    """PRM-guided step-level beam search over a list of prompts; one Result per prompt.

    ``params`` are the sampling params of a step (``n``, ``stop`` and ``max_tokens`` are set
    per step; default temperature 1). ``select`` picks the answer among the finished
    candidates: highest PRM value, majority vote or PRM-weighted vote over ``answer(text)``.
    Raises ``InvalidParameterError`` for bad options before any model call.
    """
    positive_int("width", width)
    positive_int("branching", branching)
    positive_int("lookahead", lookahead, 0)
    choose_by(select, [])  # validates the mode
    search = StepSearch("step_beam_search", generator, prompts, prm, params=params, steps=steps,
                        aggregation=aggregation, budget=budget, max_depth=max_depth)
    run_beams(search, 1, width, branching, lookahead)
    return search.results(
        lambda tree, cands: choose_by(select, cands, answer),
        trace={"width": width, "branching": branching, "lookahead": lookahead,
               "select": select, "aggregation": aggregation},
        candidates=lambda tree: [n for n in tree.terminal_leaves() if not n.pruned])


@dataclass(frozen=True, slots=True)
class StepBeamConfig(SelectingStepConfig):
    """step_beam_search's parameters besides N (samples per search step)."""

    width: int | None = param(None, "paths kept per step (default N // branching)", lo=1)
    branching: int | None = param(None, "children per kept path (default min(4, N))", lo=1)
    lookahead: int | None = param(None, "greedy steps taken to value a child (0: none)", lo=0)


SPECS = [
    StrategySpec("step_beam_search", step_beam_search, "each_n", "step beam (PRM)",
                 StepBeamConfig, scale=samples_per_step, needs=frozenset({"prm"}),
                 scorer_args={"prm": "prm"}),
    StrategySpec("lookahead_search", step_beam_search, "each_n", "lookahead search (PRM)",
                 StepBeamConfig, scale=samples_per_step, needs=frozenset({"prm"}),
                 scorer_args={"prm": "prm"}, defaults={"lookahead": 2}),
]
