"""Wall time per item at each (strategy, N) of a run, from the seconds the runner stored in each
result's trace (:mod:`metagen.eval.timing`), and what the page shows of it (pure): the
per-item latency's median and 90th percentile, its mean, and the throughput in items per second.

Throughput is ``items / the sum of their stored seconds``: the rate of that (strategy, N) done
one item at a time on what the run ran on. It is computed from the stored per-item times, so a
resumed run counts its earlier sessions' items with the times they had then, and the time
between sessions (or spent on the run's other strategies) is not counted; items run
concurrently were each timed as they ran. A (strategy, N) any of whose items has no stored time
(a store written before the runner timed items) gets no latency (``None``), so a number never
covers fewer items than its accuracy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from metagen.eval.timing import SECONDS
from metagen.report.costs import Row
from metagen.report.curves import COST_METRICS, TIME_FIELDS

Latency = dict[str, float | None]  # {"seconds", "p50", "p90", "throughput"}


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 <= q <= 1) of ``values`` by linear interpolation between order
    statistics (position ``q * (len - 1)`` of the sorted values; numpy's default). Raises
    ``ValueError`` for no values or ``q`` outside [0, 1]."""
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not in [0, 1]")
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    lo = math.floor(at)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)


def latency(seconds: Sequence[float]) -> Latency:
    """Of per-item wall times ``seconds``: their mean, median (p50), 90th percentile and the
    throughput ``len / sum`` in items per second (None when the sum is 0); every field None
    when there are no times or any is not a finite non-negative number."""
    if not seconds or any(not math.isfinite(s) or s < 0 for s in seconds):
        return dict.fromkeys(TIME_FIELDS)
    total = math.fsum(seconds)
    return {"seconds": total / len(seconds), "p50": quantile(seconds, 0.5),
            "p90": quantile(seconds, 0.9),
            "throughput": len(seconds) / total if total > 0 else None}


def item_seconds(rows: Sequence[Row]) -> dict[tuple[str, int], float]:
    """(strategy, N) -> the item's stored seconds, from its result ``rows`` (cost rows carry
    none; rows of one (strategy, N) carry the same time); NaN where a row of that (strategy, N)
    has no stored time."""
    out: dict[tuple[str, int], float] = {}
    for strategy, n, metric, _, trace in rows:
        if metric in COST_METRICS:
            continue
        value = trace.get(SECONDS) if isinstance(trace, Mapping) else None
        seconds = (float(value) if isinstance(value, (int, float))
                   and not isinstance(value, bool) else math.nan)
        before = out.get((strategy, n), seconds)
        out[(strategy, n)] = (math.nan if math.isnan(before) or math.isnan(seconds)
                              else max(before, seconds))
    return out


def run_latency(results: Mapping[str, Sequence[Row]]) -> dict[tuple[str, int], Latency]:
    """(strategy, N) -> :func:`latency` of its items' seconds, for every (strategy, N) of the
    store's ``results`` (item -> its rows)."""
    per_key: dict[tuple[str, int], list[float]] = {}
    for rows in results.values():
        for key, seconds in item_seconds(rows).items():
            per_key.setdefault(key, []).append(seconds)
    return {key: latency(values) for key, values in sorted(per_key.items())}
