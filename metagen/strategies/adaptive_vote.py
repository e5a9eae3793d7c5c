"""Adaptive self-consistency: sample in small batches, stop once the vote is decided.

Majority voting over a fixed ``n`` spends the same tokens on an easy question whose first samples
all agree as on a hard one. :func:`adaptive_self_consistency` (Aggarwal et al. 2023; Li et al.
2024's early-stopping variant with ``rule="window"``) draws ``batch`` samples per prompt per
round and stops a prompt as soon as :func:`~metagen.strategies.stopping.vote_decided` says its
vote is decided at ``confidence`` (``"beta"``: the Beta-posterior probability that the leader
stays the leader), or when ``n`` samples are drawn. Its fixed-budget twin is
:func:`~metagen.strategies.voting.self_consistency` at the same ``n``.

Contracts:

- Each round is ONE ``generate`` call for every prompt still open, ``min(batch, n - drawn)``
  samples each; a seeded run gives round ``r`` the seed ``derive_seed(seed, r)`` (round 0 keeps
  it), so rounds do not repeat draws and the run is reproducible.
- Failed samples (``finish_reason == "error"``) are dropped and never vote (``Result.failures``);
  a prompt's stop decision reads only its successful samples so far.
- The final choice is :class:`~metagen.strategies.voting.SelfConsistency` over all the prompt's
  successful samples (same tie-breaking), with the same Result layout as ``self_consistency``
  plus ``trace["rounds"]`` (rounds the prompt took) and ``trace["decided"]`` (stopped by the
  rule, not by ``n``). Each prompt's usage is what its own requests used over the rounds
  (:mod:`metagen.strategies.parallel`); ``min_successful`` raises ``InsufficientSamples`` as in
  ``self_consistency``.
- A :class:`~metagen.strategies.budget.Budget` is asked before each round (none once it is
  exhausted) and each round gets what is left of it as its allowance, enforced in flight
  (:mod:`metagen.strategies.budget`); a round that the budget cut is the last
  (``stopped_by_budget``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from metagen.allowance import budget_cut
from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.generators.metered import metered_generate
from metagen.scorers.verifiers import Extract, Match
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import (
    DEFAULT_PARAMS,
    select_and_wrap,
    as_prompt_list,
    check_counts,
    failure_reason,
)
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.step_search import derive_seed
from metagen.strategies.stopping import STOP_RULES, StopRule, vote_decided
from metagen.strategies.voting import SelfConsistency
from metagen.types import Completion, Result, SamplingParams, Usage


def check_confidence(value: object, name: str = "confidence") -> float:
    """``value`` as a float in (0, 1), else ``InvalidParameterError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0.0 < float(value) < 1.0:
        raise InvalidParameterError(name, value, "must be a number in (0, 1)")
    return float(value)


def round_size(batch: int, drawn: int, n: int, budget: Budget | None, used: Usage) -> int:
    """Samples per open prompt in the next round: ``min(batch, n - drawn)``, or 0 (no round)
    once the budget is exhausted by ``used``."""
    if budget is not None and budget.exhausted(used):
        return 0
    return min(batch, n - drawn)


def adaptive_self_consistency(
        generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16, batch: int = 4,
        rule: StopRule = "beta", confidence: float = 0.95, window: int = 4,
        extract: Extract | None = None, match: Match | None = None,
        params: SamplingParams | None = None, budget: Budget | None = None,
        min_successful: int = 1, answer_key: AnswerKey | None = None) -> Result | list[Result]:
    """Majority vote that stops sampling a prompt once its vote is decided (see module doc).

    ``n``: the most samples per prompt; ``batch``: samples per round; ``rule``/``confidence``/
    ``window``: the stopping rule of :func:`~metagen.strategies.stopping.vote_decided`.
    Raises ``InvalidParameterError`` naming the bad option before any model call."""
    start = time.perf_counter()
    prompts, single = as_prompt_list(prompt)
    params = params or DEFAULT_PARAMS
    positive_int("n", n)
    positive_int("batch", batch)
    positive_int("window", window)
    positive_int("min_successful", min_successful)
    if rule not in STOP_RULES:
        raise InvalidParameterError("rule", rule, f"must be one of {', '.join(STOP_RULES)}")
    check_confidence(confidence)
    params.with_(n=min(batch, n))  # validates (e.g. n > 1 with greedy is refused)
    if budget is not None:
        budget.check_generator(generator)
    selector = SelfConsistency(extract, match, answer_key=answer_key)
    rows: list[list[Completion]] = [[] for _ in prompts]
    rounds = [0] * len(prompts)
    decided = [False] * len(prompts)
    gen_usage = [Usage() for _ in prompts]
    capped, r = False, 0
    while not capped:
        open_ = [i for i in range(len(prompts)) if not decided[i] and len(rows[i]) < n]
        if not open_:
            break
        size = round_size(batch, len(rows[open_[0]]), n, budget, sum(gen_usage, Usage()))
        if size < 1:
            capped = True
            break
        seed = params.seed if params.seed is None or r == 0 else derive_seed(params.seed, r)
        allowance = None if budget is None else budget.allowance(sum(gen_usage, Usage()))
        call = metered_generate(generator, [prompts[i] for i in open_],
                                params.with_(n=size, seed=seed), allowance)
        outs = check_counts(call.completions, len(open_), size, type(generator).__name__)
        r += 1
        for i, row, used in zip(open_, outs, call.usage):
            rows[i].extend(row)
            rounds[i] += 1
            gen_usage[i] = gen_usage[i] + used
            capped = capped or any(budget_cut(c) for c in row)
            ok = [c for c in rows[i] if failure_reason(c) is None]
            decided[i] = vote_decided(selector.answer_classes(ok)[1], rule,
                                      confidence=confidence, window=window)
    results = select_and_wrap(prompts, single, rows, selector, n, capped, gen_usage, start,
                              min_successful)
    for i, res in enumerate([results] if isinstance(results, Result) else results):
        res.trace.update({"strategy": "adaptive_self_consistency", "rounds": rounds[i],
                          "decided": decided[i], "rule": rule, "confidence": confidence})
    return results


@dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """adaptive_self_consistency's parameters besides N (its most samples)."""

    batch: int = param(4, "samples per round", lo=1)
    rule: StopRule = param("beta", "when the vote is decided: beta (leader's posterior) or "
                           "window (the last samples agree)")
    confidence: float = param(0.95, "the beta rule's probability that the leader leads",
                              lo=0.0, lo_open=True, hi=0.999999)
    window: int = param(4, "the window rule's run of agreeing samples", lo=1)
    min_successful: int = param(1, "fewest successful samples to vote", lo=1)


SPEC = StrategySpec("adaptive_self_consistency", adaptive_self_consistency, "adaptive",
                    "adaptive self-consistency", AdaptiveConfig)
