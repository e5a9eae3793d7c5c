"""Results by difficulty bin, and which strategy wins per bin and budget (pure functions over
:class:`~metagen.eval.runrows.RunRows`), for ``results.json``'s ``by_difficulty`` and
``compute_optimal`` (Snell et al. 2024: the best test-time strategy depends on the question's
difficulty and the budget).

The budget is N, the samples per item (Snell's generation budget); a winner is the strategy of
highest mean accuracy over the bin's items at that N, ties broken by fewer mean generated tokens
per item (unknown counts last), then by name. Only strategies with an ``accuracy`` value for
every item of the bin compete (``pass@k`` is an oracle, never a candidate). A table is made
even for a single strategy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from metagen.eval.difficulty import DEFAULT_BINS, Source, choose_binning
from metagen.eval.estimators import mean_stderr
from metagen.eval.metrics import ACCURACY, summarize
from metagen.eval.runrows import Row, RunRows

ALL = "all"  # the bin of every item
Accuracy = dict[tuple[str, int], dict[str, float]]  # (strategy, n) -> item -> accuracy


def accuracy_table(rows: Sequence[Row]) -> Accuracy:
    """(strategy, n) -> item -> accuracy, from the ``accuracy`` rows."""
    out: Accuracy = {}
    for item, strategy, n, metric, value in rows:
        if metric == ACCURACY:
            out.setdefault((strategy, n), {})[item] = value
    return out


def mean_tokens(tokens: Mapping[tuple[str, str, int], float], strategy: str, n: int,
                items: Sequence[str]) -> float | None:
    """Mean generated tokens per item of (strategy, n) over ``items``; None unless every item
    has a count."""
    values = [tokens.get((i, strategy, n)) for i in items]
    if not items or any(v is None for v in values):
        return None
    return math.fsum(v for v in values if v is not None) / len(values)


def winner(acc: Accuracy, tokens: Mapping[tuple[str, str, int], float], n: int,
           items: Sequence[str]) -> dict[str, Any] | None:
    """The winning strategy at budget ``n`` over ``items`` (see the module docstring) with its
    accuracy, stderr, mean tokens and every candidate's accuracy; None when no strategy has
    every item."""
    cands: dict[str, tuple[float, float, float | None]] = {}
    for (strategy, m), values in acc.items():
        if m == n and items and all(i in values for i in items):
            mean, err = mean_stderr([values[i] for i in items])
            cands[strategy] = (mean, err, mean_tokens(tokens, strategy, n, items))
    if not cands:
        return None
    best = min(cands, key=lambda s: (-round(cands[s][0], 12),
                                     math.inf if cands[s][2] is None else cands[s][2], s))
    mean, err, tok = cands[best]
    return {"strategy": best, "accuracy": mean, "stderr": err, "tokens": tok,
            "candidates": {s: cands[s][0] for s in sorted(cands)}}


def by_difficulty(run: RunRows, bins: Mapping[str, str],
                  order: Sequence[str]) -> list[dict[str, Any]]:
    """:func:`~metagen.eval.metrics.summarize` within each bin (mean, stderr, items per
    (strategy, n, metric)) with the mean generated ``tokens`` per item (None when unknown),
    each dict with its ``bin``, bins in ``order``."""
    out = []
    for b in order:
        rows = [r for r in run.rows if bins.get(r[0]) == b]
        for row in summarize(rows):
            items = sorted({r[0] for r in rows if r[1:4] == (row["strategy"], row["n"],
                                                           row["metric"])})
            out.append({"bin": b, **row, "tokens": mean_tokens(run.tokens, row["strategy"],
                                                               row["n"], items)})
    return out


def winners_table(run: RunRows, bins: Mapping[str, str], order: Sequence[str]
                  ) -> list[dict[str, Any]]:
    """The winner per bin (``order``, then :data:`ALL`) and per budget N, as rows."""
    acc = accuracy_table(run.rows)
    ns = sorted({n for _, n in acc})
    groups = {b: sorted(i for i in bins if bins[i] == b) for b in order}
    groups[ALL] = sorted(bins)
    out = []
    for b, items in groups.items():
        for n in ns:
            won = winner(acc, run.tokens, n, items)
            if won is not None:
                out.append({"bin": b, "n": n, "items": len(items), **won})
    return out


def difficulty_tables(run: RunRows, source: Source | Literal["auto"] = "auto",
                      k: int = DEFAULT_BINS) -> dict[str, Any]:
    """``{"by_difficulty": ..., "compute_optimal": ...}`` for ``results.json``; both None when
    the run has no done item or nothing to bin its items by."""
    items = run.items
    if not items or (source == "auto" and not _binnable(run, items)):
        return {"by_difficulty": None, "compute_optimal": None}
    binning, bins = choose_binning(items, run.labels, run.pass1, run.mean_score, source, k)
    counts = {b: sum(1 for i in items if bins[i] == b) for b in binning.order}
    return {"by_difficulty": {"binning": binning.to_dict(counts),
                              "results": by_difficulty(run, bins, binning.order)},
            "compute_optimal": {"budget": "n (samples per item)", "binning": binning.source,
                                "table": winners_table(run, bins, binning.order)}}


def _binnable(run: RunRows, items: Sequence[str]) -> bool:
    return any(all(m.get(i) is not None for i in items)
               for m in (run.labels, run.pass1, run.mean_score))
