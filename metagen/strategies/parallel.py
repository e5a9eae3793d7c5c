"""Sample N once, then select: the shared driver of every parallel strategy.

:func:`run_parallel` makes exactly ONE ``generator.generate`` call for all prompts' samples, drops
failed samples (``finish_reason == "error"``; the reason is the completion's ``stop_reason``),
hands the successful ones to a :class:`~metagen.strategies.selection.Selector`, and builds one
:class:`~metagen.types.Result` per prompt with the run's compute:

- only successful samples are scored or voted on; ``Result.failures`` maps reason -> count and
  ``trace`` has ``requested`` / ``ok`` / ``failed``;
- a prompt with fewer than ``min_successful`` successes is not scored, and the call raises
  :class:`~metagen.errors.InsufficientSamples` whose ``partial`` holds the results (a single
  Result, or the list) — the failing prompts' results have ``best=None``;
- a :class:`~metagen.strategies.budget.Budget` caps ``n`` so that ``n * max_tokens`` per prompt
  fits its token limit (generated tokens then never exceed it); a capped run is marked
  ``stopped_by_budget``, and with room for no sample at all no call is made.

Usage: generator usage is ``generator.usage`` after minus before, scorer usage likewise, and
``wall_time`` is the wall time of the whole run. For a list of prompts each Result carries an
apportioned share (by its share of generated tokens; integers by largest remainder, so the
shares add up exactly) and ``trace["batch_usage"]`` holds the batch total.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any

from metagen.errors import InsufficientSamples, InvalidParameterError
from metagen.generators.base import Generator, Prompt, check_prompts
from metagen.strategies.budget import Budget
from metagen.strategies.selection import Selector
from metagen.types import Completion, Result, SamplingParams, Usage

DEFAULT_PARAMS = SamplingParams(temperature=1.0, max_tokens=256)


def as_prompt_list(prompt: Prompt | Sequence[Prompt]) -> tuple[list[Prompt], bool]:
    """(prompts, single): a string or one chat conversation is a single prompt."""
    if isinstance(prompt, str):
        return check_prompts([prompt]), True
    if isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) for m in prompt):
        return check_prompts([prompt]), True
    return check_prompts(prompt), False



def failure_reason(completion: Completion) -> str | None:
    """None for a successful sample, else its failure reason."""
    if completion.finish_reason != "error":
        return None
    return completion.stop_reason if isinstance(completion.stop_reason, str) else "error"


def check_counts(outs: object, n_prompts: int, n: int, who: str) -> list[list[Completion]]:
    """The generator returned ``n_prompts`` lists of ``n`` completions (else ``ValueError``)."""
    if not isinstance(outs, list) or len(outs) != n_prompts \
            or any(not isinstance(row, list) or len(row) != n for row in outs):
        raise ValueError(f"{who} returned a malformed batch (expected {n_prompts} lists of {n})")
    return outs


def cap_n(n: int, max_tokens: int, n_prompts: int, budget: Budget | None) -> int:
    """The largest n' <= n with n' * max_tokens * n_prompts within the budget's token limit."""
    if budget is None:
        return n
    room = budget.remaining_tokens(Usage())
    return n if room is None else min(n, room // (max_tokens * n_prompts))


def run_parallel(generator: Generator, prompt: Prompt | Sequence[Prompt], selector: Selector, *,
                 n: int, params: SamplingParams | None = None, budget: Budget | None = None,
                 min_successful: int = 1) -> Result | list[Result]:
    """Sample ``n`` per prompt in one call, select per prompt. See the module docstring."""
    start = time.perf_counter()
    prompts, single = as_prompt_list(prompt)
    params = params or DEFAULT_PARAMS
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidParameterError("n", n, "must be a positive integer")
    if not isinstance(min_successful, int) or not 1 <= min_successful:
        raise InvalidParameterError("min_successful", min_successful, "must be an int >= 1")
    if budget is not None:
        budget.check_generator(generator)
    n_run = cap_n(n, params.max_tokens, len(prompts), budget)
    capped = n_run < n
    if n_run == 0:
        results = [Result(best=None, stopped_by_budget=True,
                          trace={"strategy": selector.name, "requested": n, "n": 0, "ok": 0,
                                 "failed": {}}) for _ in prompts]
        return results[0] if single else results
    sample_params = params.with_(n=n_run)  # validates (e.g. n > 1 with greedy is refused)
    gen_before = generator.usage
    outs = check_counts(generator.generate(prompts, sample_params), len(prompts), n_run,
                        type(generator).__name__)
    gen_usage = generator.usage - gen_before
    return select_and_wrap(prompts, single, outs, selector, n, capped, gen_usage, start,
                            min_successful)


def select_and_wrap(prompts: list[Prompt], single: bool, outs: list[list[Completion]],
                     selector: Selector, requested: int, capped: bool, gen_usage: Usage,
                     start: float, min_successful: int) -> Result | list[Result]:
    """One :class:`Result` per prompt (a list unless ``single``) from its ``outs`` row: the
    selector's pick among the successful completions, usage and the failures counted; a row
    with fewer than ``min_successful`` successes gets a failed result naming the shortfall."""
    oks: list[list[tuple[int, Completion]]] = []
    failures: list[dict[str, int]] = []
    short: list[int] = []
    for i, row in enumerate(outs):
        ok = [(j, c) for j, c in enumerate(row) if failure_reason(c) is None]
        oks.append(ok)
        failures.append(dict(Counter(r for r in map(failure_reason, row) if r)))
        if len(ok) < min_successful:
            short.append(i)
    live = [i for i in range(len(prompts)) if i not in short]
    score_before = selector.usage
    selections = selector.select([prompts[i] for i in live],
                                 [[c for _, c in oks[i]] for i in live]) if live else []
    total = gen_usage + (selector.usage - score_before)
    total = _with_wall(total, time.perf_counter() - start)
    weights = [sum(c.num_tokens for c in row) for row in outs]
    shares = [total] if single else apportion(total, weights)
    results = []
    chosen = dict(zip(live, selections))
    for i, row in enumerate(outs):
        cands = [c for _, c in oks[i]]
        trace: dict[str, Any] = {"strategy": selector.name, "requested": requested,
                                 "n": len(row), "ok": len(cands), "failed": failures[i],
                                 "sample_index": [j for j, _ in oks[i]]}
        if not single:
            trace["batch_usage"] = total.to_dict()
        sel = chosen.get(i)
        if sel is not None:
            trace.update(sel.trace)
        results.append(Result(
            best=cands[sel.index] if sel is not None else None, candidates=cands,
            scores=sel.scores if sel is not None else [None] * len(cands), usage=shares[i],
            trace=trace, stopped_by_budget=capped, failures=failures[i]))
    out: Result | list[Result] = results[0] if single else results
    if short:
        reasons: Counter[str] = Counter()
        for i in short:
            reasons.update(failures[i])
        raise InsufficientSamples(
            f"{len(short)} of {len(prompts)} prompts had fewer than min_successful="
            f"{min_successful} successful samples (failures: {dict(reasons)})",
            partial=out, failures=dict(reasons))
    return out


def _with_wall(usage: Usage, seconds: float) -> Usage:
    return Usage(**{**usage.to_dict(), "wall_time": seconds})


def apportion(total: Usage, weights: Sequence[float]) -> list[Usage]:
    """Split ``total`` by ``weights`` (equal when all are 0); integer fields by largest
    remainder so that the parts add up exactly to ``total``."""
    k = len(weights)
    s = float(sum(weights))
    frac = [w / s for w in weights] if s > 0 else [1.0 / k] * k
    parts: list[dict[str, Any]] = [{} for _ in range(k)]
    for f in fields(Usage):
        value = getattr(total, f.name)
        if isinstance(value, int):
            raw = [value * q for q in frac]
            base = [int(r) for r in raw]
            order = sorted(range(k), key=lambda i: (base[i] - raw[i], i))
            for i in order[:value - sum(base)]:
                base[i] += 1
            for i in range(k):
                parts[i][f.name] = base[i]
        else:
            for i in range(k):
                parts[i][f.name] = value * frac[i]
    return [Usage(**p) for p in parts]
