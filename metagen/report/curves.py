"""The accuracy curves of one run (pure): one curve per (strategy, metric) of ``results.json``'s
``results`` rows, its points in increasing N, each with the row's mean, standard error and item
count, the per-item compute at that N (tokens, FLOPs; ``None`` when not recorded) and the
per-item wall time (:mod:`~metagen.report.latency`: mean ``seconds``, ``p50``, ``p90``,
``throughput`` in items per second; ``None`` when not recorded).

Rows of the cost metrics (:data:`COST_METRICS`: a runner that records per-item generated tokens
and FLOPs as rows of their own, the mean over items in ``mean``) are not curves: they give the
compute of the other rows of their (strategy, N), before the cost derived from the store
(:func:`~metagen.report.costs.run_costs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.eval.cost import FLOPS, TOKENS
from metagen.report.costs import Cost

#: metric name of a cost row -> the point's field it fills
COST_METRICS = {TOKENS: "tokens", FLOPS: "flops"}
#: a point's wall-time fields (:func:`~metagen.report.latency.latency`)
TIME_FIELDS = ("seconds", "p50", "p90", "throughput")


def run_curves(rows: Sequence[Mapping[str, Any]], costs: Mapping[tuple[str, int], Cost],
               times: Mapping[tuple[str, int], Mapping[str, float | None]] | None = None
               ) -> list[dict[str, Any]]:
    """[{"strategy", "metric", "points": [{"n", "mean", "stderr", "items", "tokens", "flops",
    "seconds", "p50", "p90", "throughput"}]}], curves in order of first appearance, points
    sorted by N; ``times``: (strategy, N) -> its latency fields."""
    recorded: dict[tuple[str, int], dict[str, Any]] = {}
    for row in rows:
        if row["metric"] in COST_METRICS and isinstance(row.get("mean"), (int, float)):
            recorded.setdefault((str(row["strategy"]), int(row["n"])), {})[
                COST_METRICS[row["metric"]]] = row["mean"]
    curves: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        if row["metric"] in COST_METRICS:
            continue
        key = (str(row["strategy"]), int(row["n"]))
        point = {"n": key[1], "mean": row.get("mean"), "stderr": row.get("stderr"),
                 "items": row.get("items")}
        for name in COST_METRICS.values():
            point[name] = recorded.get(key, {}).get(name, costs.get(key, {}).get(name))
        for name in TIME_FIELDS:
            point[name] = (times or {}).get(key, {}).get(name)
        curves.setdefault((key[0], str(row["metric"])), []).append(point)
    return [{"strategy": s, "metric": m, "points": sorted(p, key=lambda q: q["n"])}
            for (s, m), p in curves.items()]
