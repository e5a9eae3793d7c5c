"""The difficulty breakdown and the compute-optimal table of a run, pivoted for display (pure).

Input shapes (``results.json``): ``by_difficulty`` rows {strategy, n, metric, bin, mean, stderr,
items}; ``compute_optimal`` rows {bin, n, strategy, accuracy}. Bins keep their order of first
appearance; a missing section gives ``None`` (the page says so)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def difficulty_table(rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """{"bins": [...], "rows": [{"strategy", "metric", "n", "cells": [{mean, stderr, items} or
    None per bin]}]} with rows sorted by (strategy, metric, n)."""
    if not rows:
        return None
    bins = _ordered(str(r["bin"]) for r in rows)
    cells: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        key = (str(r["strategy"]), str(r["metric"]), int(r["n"]))
        cells.setdefault(key, {})[str(r["bin"])] = {
            "mean": r["mean"], "stderr": r.get("stderr"), "items": r.get("items")}
    return {"bins": bins, "rows": [
        {"strategy": s, "metric": m, "n": n, "cells": [by_bin.get(b) for b in bins]}
        for (s, m, n), by_bin in sorted(cells.items())]}


def compute_optimal_table(rows: Sequence[Mapping[str, Any]] | None) -> dict[str, Any] | None:
    """{"ns": [...], "rows": [{"bin", "cells": [{strategy, accuracy} or None per N]}]}: which
    strategy wins each (difficulty bin, budget N)."""
    if not rows:
        return None
    ns = sorted({int(r["n"]) for r in rows})
    by_bin: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_bin.setdefault(str(r["bin"]), {})[int(r["n"])] = {
            "strategy": r["strategy"], "accuracy": r.get("accuracy")}
    return {"ns": ns, "rows": [{"bin": b, "cells": [cells.get(n) for n in ns]}
                               for b, cells in by_bin.items()]}


def _ordered(values: Any) -> list[str]:
    return list(dict.fromkeys(values))
