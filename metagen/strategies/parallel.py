"""Sample N once, then select: the shared driver of every parallel strategy.

:func:`run_parallel` makes exactly ONE generate call
(:func:`~metagen.generators.metered.metered_generate`) for all prompts' samples, drops
failed samples (``finish_reason == "error"``; the reason is the completion's ``stop_reason``),
hands the successful ones to a :class:`~metagen.strategies.selection.Selector`, and builds one
:class:`~metagen.types.Result` per prompt with the run's compute:

- only successful samples are scored or voted on; ``Result.failures`` maps reason -> count and
  ``trace`` has ``requested`` / ``ok`` / ``failed``;
- a prompt with fewer than ``min_successful`` successes is not scored, and the call raises
  :class:`~metagen.errors.InsufficientSamples` whose ``partial`` holds the results (a single
  Result, or the list) — the failing prompts' results have ``best=None``;
- a :class:`~metagen.strategies.budget.Budget` is kept within the call: it gets the budget's
  allowance, which a step-by-step backend enforces between decoding steps (the samples share the
  token pool; FLOPs and the deadline stop them in flight) and a remote one as a ``max_tokens``
  cap (:mod:`metagen.generators.metered`). A sample the budget stopped keeps its tokens and is a
  candidate; one stopped before its first token is not drawn (``trace["not_drawn"]``). A run
  with a budget-stopped sample is marked ``stopped_by_budget``, and then a prompt with fewer than
  ``min_successful`` candidates gets ``best=None`` instead of raising.

Usage: each Result's generator usage is what its own prompt's requests used (prompt, cached and
generated tokens, FLOPs; a call that served several prompts is counted on the first), as the
generator reports it; scorer usage is apportioned by the prompts' shares of generated tokens
(integers by largest remainder) and the run's wall time in equal parts, so the Results' usages
add up to the batch total, which ``trace["batch_usage"]`` holds for a list of prompts.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from metagen.allowance import budget_cut
from metagen.errors import InsufficientSamples, InvalidParameterError
from metagen.generators.base import Generator, Prompt, check_prompts
from metagen.generators.metered import apportion, metered_generate  # noqa: F401 (re-exported)
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
    sample_params = params.with_(n=n)  # validates (e.g. n > 1 with greedy is refused)
    call = metered_generate(generator, prompts, sample_params,
                            None if budget is None else budget.allowance(Usage()))
    outs = check_counts(call.completions, len(prompts), n, type(generator).__name__)
    return select_and_wrap(prompts, single, outs, selector, n, False, call.usage, start,
                           min_successful)


def select_and_wrap(prompts: list[Prompt], single: bool, outs: list[list[Completion]],
                    selector: Selector, requested: int, capped: bool, gen_usage: Sequence[Usage],
                    start: float, min_successful: int) -> Result | list[Result]:
    """One :class:`Result` per prompt (a list unless ``single``) from its ``outs`` row: the
    selector's pick among the successful completions, usage (``gen_usage[i]``: prompt ``i``'s
    generator usage) and the failures counted. Samples the budget stopped before their first
    token are not drawn; a run with a budget-stopped sample (or ``capped``) is
    ``stopped_by_budget``. A row with fewer than ``min_successful`` successes gets a failed
    result, and the call raises ``InsufficientSamples`` naming the shortfall -- unless the
    budget stopped the run."""
    capped = capped or any(budget_cut(c) for row in outs for c in row)
    oks: list[list[tuple[int, Completion]]] = []
    failures: list[dict[str, int]] = []
    not_drawn: list[int] = []
    short: list[int] = []
    for i, row in enumerate(outs):
        ok = [(j, c) for j, c in enumerate(row) if failure_reason(c) is None and not _undrawn(c)]
        oks.append(ok)
        failures.append(dict(Counter(r for r in map(failure_reason, row) if r)))
        not_drawn.append(sum(map(_undrawn, row)))
        if len(ok) < min_successful:
            short.append(i)
    live = [i for i in range(len(prompts)) if i not in short]
    score_before = selector.usage
    selections = selector.select([prompts[i] for i in live],
                                 [[c for _, c in oks[i]] for i in live]) if live else []
    weights = [sum(c.num_tokens for c in row) for row in outs]
    shares = _shares(gen_usage, selector.usage - score_before, weights,
                     time.perf_counter() - start)
    total = sum(shares, Usage())
    results = []
    chosen = dict(zip(live, selections))
    for i, row in enumerate(outs):
        cands = [c for _, c in oks[i]]
        trace: dict[str, Any] = {"strategy": selector.name, "requested": requested,
                                 "n": len(row), "ok": len(cands), "failed": failures[i],
                                 "sample_index": [j for j, _ in oks[i]],
                                 "not_drawn": not_drawn[i]}
        if not single:
            trace["batch_usage"] = total.to_dict()
        sel = chosen.get(i)
        if sel is not None:
            trace.update(sel.trace)
        results.append(Result(
            best=cands[sel.index] if sel is not None else None, candidates=cands,
            scores=sel.scores if sel is not None else [None] * len(cands),
            usage=total if single else shares[i], trace=trace, stopped_by_budget=capped,
            failures=failures[i]))
    out: Result | list[Result] = results[0] if single else results
    if short and not capped:
        reasons: Counter[str] = Counter()
        for i in short:
            reasons.update(failures[i])
        raise InsufficientSamples(
            f"{len(short)} of {len(prompts)} prompts had fewer than min_successful="
            f"{min_successful} successful samples (failures: {dict(reasons)})",
            partial=out, failures=dict(reasons))
    return out


def _undrawn(c: Completion) -> bool:
    """A sample the budget stopped before its first token (never drawn)."""
    return budget_cut(c) and c.num_tokens == 0


def _shares(gen_usage: Sequence[Usage], scorer: Usage, weights: Sequence[float],
            seconds: float) -> list[Usage]:
    """Per prompt: its generator usage, its share of the scorer usage (by ``weights``) and an
    equal part of the run's wall time ``seconds``."""
    k = len(gen_usage)
    parts = apportion(scorer, weights)
    return [with_wall(g + p, seconds / k) for g, p in zip(gen_usage, parts)]


def with_wall(usage: Usage, seconds: float) -> Usage:
    """``usage`` with its ``wall_time`` replaced by ``seconds``."""
    return Usage(**{**usage.to_dict(), "wall_time": seconds})
