"""DeepConf (Fu et al. 2025, "Deep Think with Confidence"): confidence-filtered, confidence-
weighted voting, online (traces stopped early) or offline (filtered after the fact).

Per prompt, ``warmup`` traces are generated to the end; their lowest group confidences set the
threshold ``s`` (:func:`~metagen.strategies.trace_confidence.confidence_threshold` with ``keep``:
0.1 is DeepConf-low, 0.9 DeepConf-high). The other ``n - warmup`` traces are generated in waves of
``wave``; a trace is stopped as soon as a complete window of ``window`` tokens has a mean token
confidence below ``s`` (:func:`~metagen.strategies.trace_confidence.stop_position`) and never
votes. With ``consensus``, a prompt starts no new wave once the leading answer holds that share
of the confidence-weighted vote (the paper's adaptive sampling). The answer is the
confidence-weighted vote (weight: the trace's lowest group confidence) over the finished traces
whose lowest group confidence is at least ``s``; when none is, over all finished traces.
``warmup == n`` is DeepConf *offline*: all traces run to the end and the top ``keep`` fraction
by lowest group confidence votes — the fixed-budget twin of the online run.

How a trace is stopped mid-generation: traces are generated one *step* at a time (a step ends at
``steps.stop``, a newline by default; one batched ``generate`` call per round for every live trace
of every prompt, continuing ``prompt + steps so far`` as the step searches do), with
``logprobs=top_k``; after each step the new tokens' windows are checked and a stopped trace gets
no further step. So a stopped trace costs at most the rest of the step in which its confidence
fell (counted in the usage), never the rest of the solution. This needs a backend that returns
top-k log-probabilities (``Completion.top_logprobs``; else ``CapabilityError``) and for which
continuing ``prompt + text`` samples what continuing the sequence would (true of the testbed's
tokenizer at newlines, as for every step search).

Contracts: seeds, budgets, failed samples and usage accounting are those of
:class:`~metagen.strategies.step_search.StepSearch` (each call ``j`` of a seeded run uses
``derive_seed(seed, j)``; a failed sample ends its trace and is counted in ``Result.failures``; a
budget that stops a call ends every live trace unfinished, and unfinished traces never vote).
``Result.trace`` has ``threshold``, per-trace ``lowest`` confidences, ``stopped`` (tokens at which
each online trace stopped, or None), ``kept`` and the vote (``answers``, ``votes``, ``answer``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Generator, Prompt, extend_prompt
from metagen.scorers.verifiers import Extract, Match
from metagen.strategies.adaptive_vote import check_confidence
from metagen.strategies.budget import UNLIMITED, Budget
from metagen.strategies.selection import argmax_first
from metagen.strategies.spec import StrategySpec, param
from metagen.strategies.step_beam import positive_int
from metagen.strategies.step_search import StepSearch
from metagen.strategies.steps import DEFAULT_STEPS, StepDefinition
from metagen.strategies.trace_confidence import (
    confidence_threshold,
    lowest_group_confidence,
    stop_position,
    token_confidence,
)
from metagen.strategies.voting import SelfConsistency, vote, vote_trace
from metagen.types import Completion, FinishReason, Result, SamplingParams


@dataclass(slots=True)
class Trace:
    """One sampled reasoning trace, grown a step at a time."""

    prompt: int
    online: bool
    steps: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    confs: list[float] = field(default_factory=list)
    logprob: float = 0.0
    finish: FinishReason = "stop"
    finished: bool = False
    stopped_at: int | None = None
    ended: bool = False  # failed or cut by the budget: never votes

    @property
    def live(self) -> bool:
        return not (self.finished or self.ended or self.stopped_at is not None)

    def completion(self) -> Completion:
        return Completion(text="".join(self.steps), token_ids=tuple(self.token_ids),
                          cumulative_logprob=self.logprob, finish_reason=self.finish)


def grow(search: StepSearch, traces: list[Trace], thresholds: Sequence[float | None],
         top_k: int, window: int) -> None:
    """Extend every live trace step by step until each is finished, stopped or ended: one
    batched call per round; a trace of prompt ``i`` is stopped by ``thresholds[i]``."""
    base = search.steps.params(search.params.with_(logprobs=top_k), n=1)
    while True:
        live = [t for t in traces if t.live]
        if not live:
            return
        heads: dict[tuple[int, str], list[Trace]] = {}
        for t in live:
            heads.setdefault((t.prompt, "".join(t.steps)), []).append(t)
        prefixes = [extend_prompt(search.trees[p].prompt, text) for p, text in heads]
        outs = search.continue_prefixes(prefixes, [len(ts) for ts in heads.values()], base,
                                        [p for p, _ in heads])
        if outs is None:
            for t in live:
                t.ended = True
            return
        for group, comps in zip(heads.values(), outs):
            for t, c in zip(group, comps):
                _extend(search, t, c, thresholds[t.prompt], top_k, window)


def _extend(search: StepSearch, t: Trace, c: Completion, threshold: float | None, top_k: int,
            window: int) -> None:
    if c.finish_reason == "error":
        search.failures[t.prompt][str(c.stop_reason or "generation_error")] += 1
        t.ended = True
        return
    if c.top_logprobs is None:
        raise CapabilityError("deepconf needs top-k log-probabilities per token "
                              "(a backend that honours SamplingParams.logprobs)")
    before = len(t.confs)
    t.confs.extend(token_confidence(d, top_k) for d in c.top_logprobs)
    step, final = search.steps.close(c)
    t.steps.append(step)
    t.token_ids.extend(c.token_ids)
    t.logprob += c.cumulative_logprob or 0.0
    if threshold is not None:
        t.stopped_at = stop_position(t.confs, window, threshold, start=before)
    if final or len(t.steps) >= search.max_depth:
        t.finished = True
        t.finish = c.finish_reason if final else "length"


def deepconf(generator: Generator, prompts: Sequence[Prompt], *, n: int = 16, warmup: int = 4,
             keep: float = 0.9, window: int = 8, top_k: int = 5, wave: int | None = None,
             consensus: float | None = None, max_depth: int = 16,
             params: SamplingParams | None = None, steps: StepDefinition = DEFAULT_STEPS,
             extract: Extract | None = None, match: Match | None = None,
             answer_key: AnswerKey | None = None, budget: Budget = UNLIMITED) -> list[Result]:
    """DeepConf online over a list of prompts (offline when ``warmup == n``); one Result each.

    ``n``: traces per prompt at most; ``warmup`` (1..n): full traces that set the threshold;
    ``keep``: the fraction of warm-up traces the threshold lets through; ``window``: tokens per
    group; ``top_k``: alternatives per token confidence; ``wave``: online traces started together
    (default all ``n - warmup``); ``consensus`` in (0, 1): stop starting waves at that vote share.
    Raises ``InvalidParameterError`` naming the bad option before any model call."""
    positive_int("n", n)
    positive_int("warmup", warmup)
    if warmup > n:
        raise InvalidParameterError("warmup", warmup, f"must be at most n={n}")
    positive_int("window", window)
    positive_int("top_k", top_k)
    confidence_threshold([0.0], keep)  # validates keep
    wave = positive_int("wave", wave) if wave is not None else max(1, n - warmup)
    if consensus is not None:
        check_confidence(consensus, "consensus")
    params = params if params is not None else SamplingParams(temperature=1.0)
    params.with_(logprobs=top_k)  # validates top_k against the backend-independent cap
    search = StepSearch("deepconf", generator, prompts, None, params=params, steps=steps,
                        budget=budget, max_depth=max_depth)
    voter = SelfConsistency(extract, match, answer_key=answer_key)
    k = len(search.trees)
    traces: list[list[Trace]] = [[Trace(i, False) for _ in range(warmup)] for i in range(k)]
    grow(search, [t for ts in traces for t in ts], [None] * k, top_k, window)
    thresholds = [_threshold(ts, keep, window) for ts in traces]
    while not search.stopped_by_budget:
        open_ = [i for i in range(k) if len(traces[i]) < n and not (
            consensus is not None and _leader_share(voter, traces[i], thresholds[i], window)
            >= consensus)]
        if not open_:
            break
        new = [Trace(i, True) for i in open_ for _ in range(min(wave, n - len(traces[i])))]
        for t in new:
            traces[t.prompt].append(t)
        grow(search, new, thresholds, top_k, window)
    usages = search.prompt_usages([sum(len(t.token_ids) for t in ts) for ts in traces])
    return [_result(voter, ts, thr, window, usage, search, keep, warmup)
            for ts, thr, usage in zip(traces, thresholds, usages)]


def _threshold(traces: list[Trace], keep: float, window: int) -> float | None:
    lows = [lowest_group_confidence(t.confs, window) for t in traces if t.finished and t.confs]
    return confidence_threshold(lows, keep) if lows else None


def _voters(traces: list[Trace], threshold: float | None, window: int
            ) -> tuple[list[Trace], list[float]]:
    done = [t for t in traces if t.finished and t.stopped_at is None and t.confs]
    lows = [lowest_group_confidence(t.confs, window) for t in done]
    kept = [(t, w) for t, w in zip(done, lows) if threshold is None or w >= threshold]
    if not kept:
        kept = list(zip(done, lows))
    return [t for t, _ in kept], [w for _, w in kept]


def _leader_share(voter: SelfConsistency, traces: list[Trace], threshold: float | None,
                  window: int) -> float:
    kept, weights = _voters(traces, threshold, window)
    winner, totals = vote(voter.answer_classes([t.completion() for t in kept])[1], weights)
    return 0.0 if winner is None else totals[winner] / sum(totals.values())


def _result(voter: SelfConsistency, traces: list[Trace], threshold: float | None, window: int,
            usage: Any, search: StepSearch, keep: float, warmup: int) -> Result:
    kept, weights = _voters(traces, threshold, window)
    cands = [t.completion() for t in kept]
    answers, classes = voter.answer_classes(cands)
    winner, totals = vote(classes, weights)
    best = None
    if cands:
        members = [i for i, c in enumerate(classes) if c == winner] if winner is not None \
            else list(range(len(cands)))
        best = cands[members[argmax_first([weights[i] for i in members])]]
    tree = search.trees[traces[0].prompt] if traces else None
    info: dict[str, Any] = {
        "strategy": "deepconf", "n": len(traces), "warmup": warmup, "keep": keep,
        "window": window, "threshold": threshold,
        "lowest": [lowest_group_confidence(t.confs, window) if t.confs else None
                   for t in traces],
        "stopped": [t.stopped_at for t in traces if t.online],
        "kept": len(kept), "batch_usage": search.usage().to_dict()}
    info.update(vote_trace(answers, classes, winner, totals))
    return Result(best=best, candidates=cands, scores=list(weights), usage=usage, trace=info,
                  stopped_by_budget=search.stopped_by_budget,
                  failures=dict(search.failures[tree.index]) if tree else {})


@dataclass(frozen=True, slots=True)
class DeepConfConfig:
    """deepconf's parameters besides N (its most traces)."""

    warmup: int | None = param(None, "full traces that set the threshold (default N // 4, at "
                               "least 1); N is offline DeepConf", lo=1)
    keep: float = param(0.9, "fraction of warm-up traces the threshold lets through",
                        lo=0.0, lo_open=True, hi=1.0)
    window: int = param(8, "tokens per confidence group", lo=1)
    top_k: int = param(5, "alternatives per token confidence", lo=1)
    wave: int | None = param(None, "online traces started together", lo=1)
    consensus: float | None = param(None, "stop starting traces once the leader holds this "
                                    "share of the vote", lo=0.0, lo_open=True, hi=1.0)
    max_depth: int = param(16, "most steps in a trace", lo=1)


def _scale(n: int) -> dict[str, int]:
    return {"n": n, "warmup": max(1, n // 4)}


SPEC = StrategySpec("deepconf", deepconf, "adaptive", "DeepConf online", DeepConfConfig,
                    scale=_scale, requires=frozenset({"top_logprobs"}))
