"""Rejection sampling: sample until a verifier accepts or the budget is spent (Welleck et al.
2024, section 4.1; the "generate until it passes" loop of many reasoning and code pipelines).

Runs in rounds. Each round makes ONE generate call with ``batch`` samples for every prompt still
waiting, and one verifier call for them. A sample is accepted when its verifier score is
``>= threshold`` (a verifier may also return a bool). Stops per prompt at the first accepted
sample (the lowest index within that round), after ``max_samples``, or for everyone when the
:class:`~metagen.strategies.budget.Budget` is exhausted, or after the round it cut: each round
gets what is left of the budget as its allowance, enforced in flight
(:mod:`metagen.strategies.budget`), so generated tokens never exceed the token limit and calls
never exceed ``max_calls``; a sample stopped before its first token is not drawn (never
verified). Each prompt's usage is its own requests' (the call counted on the first of a round's
prompts), plus a share of the verifier's by generated tokens. Without an accepted sample the
best-scoring one so far is returned (``trace["accepted"] = False``). With a ``seed`` in
``params``, round r samples with seed + r.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

from metagen.allowance import budget_cut
from metagen.errors import InsufficientSamples, InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.generators.metered import metered_generate
from metagen.scorers.base import RewardLike, RewardModel
from metagen.scorers.callables import CallableReward, check_scores
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import (
    DEFAULT_PARAMS,
    apportion,
    as_prompt_list,
    check_counts,
    failure_reason,
    with_wall,
)
from metagen.strategies.selection import argmax_first, scorers_usage
from metagen.strategies.spec import StrategySpec, param
from metagen.types import SEED_MAX, Completion, Result, SamplingParams, Usage


def _as_verifier(verifier: RewardLike) -> RewardModel:
    if callable(getattr(verifier, "score", None)):
        return cast(RewardModel, verifier)
    if callable(verifier):
        return CallableReward(lambda p, c: float(verifier(p, c)))
    raise InvalidParameterError("verifier", verifier, "must be a scorer or a callable")


def rejection_sampling(generator: Generator, prompt: Prompt | Sequence[Prompt],
                       verifier: RewardLike, *,
                       threshold: float = 0.5, batch: int = 4, max_samples: int = 64,
                       params: SamplingParams | None = None, budget: Budget | None = None,
                       min_successful: int = 1) -> Result | list[Result]:
    """Sample in rounds of ``batch`` until ``verifier`` accepts. See the module docstring.

    Raises ``InsufficientSamples`` (with the partial results) when a prompt ends with fewer than
    ``min_successful`` successful samples, unless the run was stopped by the budget.
    """
    start = time.perf_counter()
    prompts, single = as_prompt_list(prompt)
    params = params or DEFAULT_PARAMS
    for name, value in (("batch", batch), ("max_samples", max_samples)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidParameterError(name, value, "must be a positive integer")
    check = _as_verifier(verifier)
    if budget is not None:
        budget.check_generator(generator)
    k = len(prompts)
    cands: list[list[Completion]] = [[] for _ in range(k)]
    scores: list[list[float]] = [[] for _ in range(k)]
    failures: list[Counter[str]] = [Counter() for _ in range(k)]
    accepted: list[int | None] = [None] * k
    drawn, rounds, stopped = 0, 0, False
    gen_usage = [Usage() for _ in range(k)]
    score_before = scorers_usage(check)
    while not stopped:
        active = [i for i in range(k) if accepted[i] is None]
        n = min(batch, max_samples - drawn)
        if not active or n <= 0:
            break
        run_usage = sum(gen_usage, Usage()) + (scorers_usage(check) - score_before)
        if budget is not None and budget.exhausted(run_usage):
            stopped = True
            break
        seed = None if params.seed is None else (params.seed + rounds) % SEED_MAX
        call = metered_generate(generator, [prompts[i] for i in active],
                                params.with_(n=n, seed=seed),
                                None if budget is None else budget.allowance(run_usage))
        outs = check_counts(call.completions, len(active), n, type(generator).__name__)
        for i, used in zip(active, call.usage):
            gen_usage[i] = gen_usage[i] + used
        stopped = any(budget_cut(c) for row in outs for c in row)
        rounds, drawn = rounds + 1, drawn + n
        _score_round(check, active, outs, prompts, cands, scores, failures, accepted, threshold)
    scorer = scorers_usage(check) - score_before
    weights = [sum(c.num_tokens for c in row) for row in cands]
    seconds = time.perf_counter() - start
    shares = [with_wall(g + part, seconds / k)
              for g, part in zip(gen_usage, apportion(scorer, weights))]
    total = sum(shares, Usage())
    if single:
        shares = [total]
    results = []
    for i in range(k):
        index = accepted[i] if accepted[i] is not None else (
            argmax_first(scores[i]) if scores[i] else None)
        trace = {"strategy": "rejection_sampling", "rounds": rounds, "requested": drawn,
                 "ok": len(cands[i]), "failed": dict(failures[i]),
                 "accepted": accepted[i] is not None, "accepted_index": accepted[i],
                 "threshold": threshold, "scores": list(scores[i])}
        if not single:
            trace["batch_usage"] = total.to_dict()
        results.append(Result(best=None if index is None else cands[i][index],
                              candidates=cands[i], scores=list(scores[i]), usage=shares[i],
                              trace=trace, stopped_by_budget=stopped and accepted[i] is None,
                              failures=dict(failures[i])))
    out: Result | list[Result] = results[0] if single else results
    short = [i for i in range(k) if len(cands[i]) < min_successful and accepted[i] is None]
    if short and not stopped:
        reasons = sum((failures[i] for i in short), Counter())
        raise InsufficientSamples(
            f"{len(short)} of {k} prompts had fewer than min_successful={min_successful} "
            f"successful samples (failures: {dict(reasons)})", partial=out,
            failures=dict(reasons))
    return out


def _score_round(check: RewardModel, active: list[int], outs: list[list[Completion]],
                 prompts: list[Prompt], cands: list[list[Completion]],
                 scores: list[list[float]], failures: list[Counter[str]],
                 accepted: list[int | None], threshold: float) -> None:
    """Verify the round's successful samples in one call; record the first acceptance."""
    pairs: list[tuple[int, Completion]] = []
    for i, row in zip(active, outs):
        for c in row:
            reason = failure_reason(c)
            if budget_cut(c) and not c.num_tokens:
                continue  # stopped by the budget before its first token: never drawn
            if reason is None:
                pairs.append((i, c))
            else:
                failures[i][reason] += 1
    if not pairs:
        return
    got = check_scores(check.score([prompts[i] for i, _ in pairs],
                                   [c.text for _, c in pairs]), len(pairs), who="verifier")
    for (i, c), s in zip(pairs, got):
        cands[i].append(c)
        scores[i].append(s)
        if accepted[i] is None and s >= threshold:
            accepted[i] = len(cands[i]) - 1


@dataclass(frozen=True, slots=True)
class RejectionConfig:
    """rejection_sampling's parameters besides N (its most samples)."""

    threshold: float = param(0.5, "the verifier's score that accepts a sample")
    batch: int | None = param(None, "samples per round (default min(4, N))", lo=1)
    min_successful: int = param(1, "fewest successful samples to choose from", lo=1)


SPEC = StrategySpec("rejection_sampling", rejection_sampling, "each_n",
                    "rejection sampling (ORM)", RejectionConfig,
                    scale=lambda n: {"max_samples": n, "batch": min(4, n)},
                    needs=frozenset({"reward"}), scorer_args={"reward": "verifier"})
