"""Accuracy and compute of parallel strategies at every N, from ONE set of samples.

All N are evaluated as nested prefixes of the same per-problem samples (the first N of 32): the
curve then shows what more samples buy without resampling noise between N, and costs one
sampling pass. Compute at N is the part of the sampling pass that produced those samples:
``generated_tokens`` counts the prefix exactly; generator FLOPs and seconds are the pass's totals
times the prefix's share of generated tokens; strategies that use the ORM add ``N / N_max`` of
its FLOPs and seconds (every sample was scored once); ``best_of_n_prm`` likewise adds its share
of the PRM's scoring of every sample. Selection reuses the library's own
selectors (:class:`~metagen.strategies.BestOfN` etc.), so the demo measures the shipped code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.demo.difficulty import with_difficulty
from metagen.generators.base import Prompt
from metagen.scorers.base import text_only
from metagen.strategies.parallel import failure_reason
from metagen.strategies.selection import Selector
from metagen.types import Completion, Usage


@dataclass(slots=True)
class DemoProblem:
    """One problem's prompt, gold answer and samples in sample order (failed ones included);
    ``orm[j]`` is the ORM score of sample j (None when it failed); ``prm[j]`` its PRM score
    aggregated over steps, when a PRM was used; ``confidence[j]`` the generator's own confidence
    in it (:class:`~metagen.scorers.LikelihoodVerifier`), when asked for."""

    prompt: str
    answer: Any
    samples: list[Completion]
    orm: list[float | None]
    prm: list[float | None] | None = None
    confidence: list[float | None] | None = None


class CachedReward:
    """A reward model over precomputed scores keyed by (prompt, completion text): the ORM's
    (``field="orm"``), the PRM's (``field="prm"``) or the confidence verifier's."""

    def __init__(self, problems: Sequence[DemoProblem],
                 field: Literal["orm", "prm", "confidence"] = "orm") -> None:
        self.table = {(p.prompt, c.text): s for p in problems
                      for c, s in zip(p.samples, getattr(p, field) or ()) if s is not None}

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        return [self.table[(p, c)]
                for p, c in zip(text_only(prompts, "CachedReward"), completions)]


def evaluate_prefixes(problems: Sequence[DemoProblem], selectors: dict[str, Selector],
                      ns: Sequence[int], grade: Callable[[str, Any], bool], *,
                      sampling: Usage, scoring: Usage, uses_orm: set[str],
                      scored_by: Mapping[str, Usage] | None = None,
                      difficulties: Sequence[str] | None = None) -> list[dict]:
    """One row per (strategy, N): accuracy, generated tokens, FLOPs, seconds, and
    ``by_difficulty`` when ``difficulties`` (one key per problem) is given.

    ``sampling`` is the usage of the one sampling call, ``scoring`` the ORM's usage over all
    samples (charged to the strategies in ``uses_orm``); ``scored_by`` maps other strategies to
    the usage of the scorer they used over all samples (e.g. ``best_of_n_prm`` to the PRM's).
    A problem with no successful sample among its first N counts as wrong.
    """
    scorers = {name: scoring for name in uses_orm} | dict(scored_by or {})
    n_max = max(len(p.samples) for p in problems)
    total_tokens = sum(c.num_tokens for p in problems for c in p.samples) or 1
    rows = []
    for n in ns:
        prefix_tokens = sum(c.num_tokens for p in problems for c in p.samples[:n])
        share = prefix_tokens / total_tokens
        groups = [[c for c in p.samples[:n] if failure_reason(c) is None] for p in problems]
        live = [i for i, g in enumerate(groups) if g]
        for name, selector in selectors.items():
            start = time.perf_counter()
            chosen = selector.select([problems[i].prompt for i in live],
                                     [groups[i] for i in live])
            correct = [False] * len(problems)
            for i, sel in zip(live, chosen):
                correct[i] = bool(grade(groups[i][sel.index].text, problems[i].answer))
            seconds = sampling.wall_time * share + time.perf_counter() - start
            flops = sampling.generator_flops * share
            if name in scorers:
                seconds += scorers[name].wall_time * n / n_max
                flops += scorers[name].scorer_flops * n / n_max
            rows.append(with_difficulty(
                {"strategy": name, "n": n, "accuracy": sum(correct) / len(problems),
                 "generated_tokens": prefix_tokens, "flops": flops, "seconds": seconds},
                correct, difficulties))
    return rows
