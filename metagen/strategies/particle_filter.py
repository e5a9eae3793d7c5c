"""Particle filtering over reasoning steps with a PRM (Puri et al. 2025, "A Probabilistic
Inference Approach to Inference-Time Scaling of LLMs using Particle-Based Monte Carlo Methods";
its_hub's ``ParticleFiltering``).

Per prompt, ``particles`` partial solutions advance together, one step per round. After each
round every particle's PRM value ``r`` (its step scores aggregated with ``aggregation``; default
the last step's) gives its weight ``softmax(r / temperature)`` over the prompt's population
(:func:`~metagen.strategies.resampling.softmax_weights`); when the effective sample size falls
below ``ess_threshold * particles`` the population is resampled by weight
(:func:`~metagen.strategies.resampling.systematic_resample`): likely particles are copied,
unlikely ones dropped, so compute follows the promising solutions while the population keeps
diversity (deterministic beam search keeps only the top few). Finished particles stay in the
population (they are not extended, but are resampled like the others). The search ends when every
particle has finished or ``max_depth`` steps. The answer is chosen over the final population
(a particle counted once per copy) with ``select``: ``"score"``, the highest-weight particle;
``"vote"``, the majority answer of the population (the particle posterior's mode);
``"weighted_vote"``, answers weighted by PRM value.

Contracts: each round is one ``generate`` call for all unfinished particles of all prompts (copies
of one particle are merged into one prefix with ``n`` = copies, so they get different samples) and
one PRM call; seeds, budgets, failures and usage as in
:class:`~metagen.strategies.step_search.StepSearch`. Resampling draws its one uniform per round
from a per-prompt ``random.Random(f"{seed}|{prompt!r}")`` (``seed`` defaults to ``params.seed``;
unseeded when both are None), so a seeded run on a seeded generator is reproducible and a prompt
resamples the same whether it is searched alone or in a batch. A particle whose step failed keeps its previous node (it is retried
next round; a prompt whose every particle keeps failing ends at ``max_depth`` rounds). ``trace``
has ``resampled`` (the rounds at which each prompt resampled) and ``ess`` per round.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, StepAggregation
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.resampling import (
    effective_sample_size,
    softmax_weights,
    systematic_resample,
)
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import Select, positive_int
from metagen.strategies.step_config import SelectingStepConfig
from metagen.strategies.step_search import StepSearch, choose_by, default_answer
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.tree import SearchNode
from metagen.types import Result, SamplingParams


def _weights(population: Sequence[SearchNode], temperature: float) -> list[float]:
    return softmax_weights([n.score if n.score is not None else 0.0 for n in population],
                           temperature)


def particle_filtering(generator: Generator, prompts: Sequence[Prompt], prm: ProcessRewardLike,
                       *, particles: int = 8, temperature: float = 1.0,
                       ess_threshold: float = 0.5, max_depth: int = 16,
                       params: SamplingParams | None = None,
                       steps: StepDefinition = DEFAULT_STEPS,
                       aggregation: StepAggregation = "last", select: Select = "score",
                       answer: Callable[[str], str | None] = default_answer,
                       seed: int | None = None, budget: Budget = UNLIMITED) -> list[Result]:
    """Particle filtering over a list of prompts; one Result per prompt (see module doc).

    ``ess_threshold`` in [0, 1]: resample when ESS < ``ess_threshold * particles`` (1 resamples
    every round but the uniform one, 0 never). Raises ``InvalidParameterError`` naming the bad
    option before any model call."""
    positive_int("particles", particles)
    softmax_weights([0.0], temperature)  # validates temperature
    if isinstance(ess_threshold, bool) or not isinstance(ess_threshold, (int, float)) \
            or not 0.0 <= ess_threshold <= 1.0:
        raise InvalidParameterError("ess_threshold", ess_threshold, "must be in [0, 1]")
    choose_by(select, [])
    search = StepSearch("particle_filtering", generator, prompts, prm, params=params,
                        steps=steps, aggregation=aggregation, budget=budget,
                        max_depth=max_depth)
    seed = search.params.seed if seed is None else seed
    rngs = [random.Random() if seed is None else random.Random(f"{seed}|{t.prompt!r}")
            for t in search.trees]
    pops: list[list[SearchNode]] = [[t.root] * particles for t in search.trees]
    resampled: list[list[int]] = [[] for _ in pops]
    ess_log: list[list[float]] = [[] for _ in pops]
    for round_ in range(max_depth):
        slots = [(p, i) for p, pop in enumerate(pops) for i, node in enumerate(pop)
                 if not node.terminal]
        if not slots:
            break
        kids = search.expand([(pops[p][i], 1) for p, i in slots])
        if kids is None:
            break
        new = [k for ks in kids for k in ks]
        search.score(new)
        for (p, i), ks in zip(slots, kids):
            if ks:
                pops[p][i] = ks[0]
        for p, pop in enumerate(pops):
            weights = _weights(pop, temperature)
            ess = effective_sample_size(weights)
            ess_log[p].append(ess)
            if ess < ess_threshold * particles:
                pops[p] = [pop[j] for j in systematic_resample(weights, rngs[p].random())]
                resampled[p].append(round_)
    by_tree = {id(t): p for p, t in enumerate(search.trees)}
    return search.results(
        lambda tree, cands: choose_by(select, cands, answer),
        trace={"particles": particles, "temperature": temperature,
               "ess_threshold": ess_threshold, "select": select, "aggregation": aggregation},
        candidates=lambda tree: [n for n in pops[by_tree[id(tree)]] if n.parent is not None],
        per_tree=lambda tree: {"resampled": resampled[by_tree[id(tree)]],
                               "ess": ess_log[by_tree[id(tree)]]})


@dataclass(frozen=True, slots=True)
class ParticleConfig(SelectingStepConfig):
    """particle_filtering's parameters besides N (its particles)."""

    temperature: float = param(1.0, "the softmax temperature over particle rewards", lo=0.0,
                               lo_open=True)
    ess_threshold: float = param(0.5, "resample when the effective sample size falls below "
                                 "this fraction", lo=0.0, hi=1.0)


SPEC = StrategySpec("particle_filtering", particle_filtering, "each_n",
                    "particle filtering (PRM)", ParticleConfig,
                    scale=lambda n: {"particles": n}, needs=frozenset({"prm"}),
                    scorer_args={"prm": "prm"})
