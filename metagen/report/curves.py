"""The accuracy curves of one run (pure): one curve per (strategy, metric) of ``results.json``'s
``results`` rows, its points in increasing N, each with the row's mean, standard error and item
count and the per-item compute at that N (tokens, FLOPs; ``None`` when not recorded).

A row that carries its own per-item ``generated_tokens`` or ``flops`` (a runner that records
compute) is taken as is; otherwise the cost comes from the store (:func:`run_costs`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.report.costs import Cost

_ROW_COST = {"tokens": "generated_tokens", "flops": "flops"}


def run_curves(rows: Sequence[Mapping[str, Any]],
               costs: Mapping[tuple[str, int], Cost]) -> list[dict[str, Any]]:
    """[{"strategy", "metric", "points": [{"n", "mean", "stderr", "items", "tokens",
    "flops"}]}], curves in order of first appearance, points sorted by N."""
    curves: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        strategy, n = str(row["strategy"]), int(row["n"])
        cost = costs.get((strategy, n), {})
        point = {"n": n, "mean": row["mean"], "stderr": row.get("stderr"),
                 "items": row.get("items")}
        for name, key in _ROW_COST.items():
            point[name] = row[key] if isinstance(row.get(key), (int, float)) else cost.get(name)
        curves.setdefault((strategy, str(row["metric"])), []).append(point)
    return [{"strategy": s, "metric": m, "points": sorted(p, key=lambda q: q["n"])}
            for (s, m), p in curves.items()]
