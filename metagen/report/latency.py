"""Wall time per item at each (strategy, N) of a run, from the times the runner stored in each
result's trace (:mod:`metagen.eval.timing`: the seconds and when the work began), and what the
page shows of it (pure): the per-item latency's median and 90th percentile, its mean, and the
throughput in items per second.

Throughput is ``items / busy seconds``, the busy seconds being the length of the union of the
items' intervals ``[began, began + seconds]`` (:func:`busy_seconds`): the wall time in which the
run was doing that (strategy, N), so items done concurrently (``--concurrency``) count once, the
time between the sessions of a resumed run is not counted, and a resumed run's earlier items
count with the times they had. An item stored without its start counts its seconds alone. A
(strategy, N) any of whose items has no stored time (a store written before the runner timed
items) gets no latency (``None``), so a number never covers fewer items than its accuracy."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from metagen.eval.timing import SECONDS, STARTED
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


def busy_seconds(seconds: Sequence[float], started: Sequence[float | None]) -> float:
    """The length of the union of the intervals ``[started[i], started[i] + seconds[i]]``, plus
    the ``seconds`` of the intervals whose start is None."""
    spans = sorted((b, b + s) for s, b in zip(seconds, started) if b is not None)
    total = math.fsum(s for s, b in zip(seconds, started) if b is None)
    end = -math.inf
    for lo, hi in spans:
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total


def latency(seconds: Sequence[float], started: Sequence[float | None] | None = None) -> Latency:
    """Of per-item wall times ``seconds`` (their work begun at ``started``, default unknown):
    their mean, median (p50), 90th percentile and the throughput ``len / busy_seconds`` in items
    per second (None when that is 0); every field None when there are no times or any is not a
    finite non-negative number."""
    if not seconds or any(not math.isfinite(s) or s < 0 for s in seconds):
        return dict.fromkeys(TIME_FIELDS)
    busy = busy_seconds(seconds, started if started is not None else [None] * len(seconds))
    return {"seconds": math.fsum(seconds) / len(seconds), "p50": quantile(seconds, 0.5),
            "p90": quantile(seconds, 0.9), "throughput": len(seconds) / busy if busy > 0 else None}


def item_times(rows: Sequence[Row]) -> dict[tuple[str, int], tuple[float, float | None]]:
    """(strategy, N) -> (the item's stored seconds, when that work began or None), from its
    result ``rows`` (cost rows carry none; rows of one (strategy, N) carry the same time); NaN
    seconds where a row of that (strategy, N) has no stored time."""
    out: dict[tuple[str, int], tuple[float, float | None]] = {}
    for strategy, n, metric, _, trace in rows:
        if metric in COST_METRICS:
            continue
        got = trace if isinstance(trace, Mapping) else {}
        seconds, began = _number(got.get(SECONDS)), _number(got.get(STARTED))
        before = out.get((strategy, n), (seconds, began))
        out[(strategy, n)] = ((math.nan if math.isnan(before[0]) or math.isnan(seconds)
                               else max(before[0], seconds)),
                              None if math.isnan(began) else began)
    return out


def _number(value: object) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else math.nan  # type: ignore[arg-type]


def run_latency(results: Mapping[str, Sequence[Row]]) -> dict[tuple[str, int], Latency]:
    """(strategy, N) -> :func:`latency` of its items' times, for every (strategy, N) of the
    store's ``results`` (item -> its rows)."""
    per_key: dict[tuple[str, int], list[tuple[float, float | None]]] = {}
    for rows in results.values():
        for key, times in item_times(rows).items():
            per_key.setdefault(key, []).append(times)
    return {key: latency([t[0] for t in times], [t[1] for t in times])
            for key, times in sorted(per_key.items())}
