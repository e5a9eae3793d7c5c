"""The difficulty breakdown and the compute-optimal table of a run, pivoted for display (pure).

Input shapes (``results.json``): ``by_difficulty`` rows {strategy, n, metric, bin, mean, stderr,
items}; ``compute_optimal`` rows {bin, n, strategy, accuracy[, stderr]}. A section is either the
list of its rows or an object holding them under ``results`` / ``table``, with its ``binning``
(source, bins, thresholds) and ``budget`` described in the table's ``note``. Bins keep their
order of first appearance; a missing or empty section gives ``None`` (the page says so)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def section_rows(section: Any) -> tuple[list[Mapping[str, Any]], str | None]:
    """(the rows of a ``results.json`` section, a note describing its binning and budget)."""
    if isinstance(section, Mapping):
        rows = section.get("results", section.get("table"))
        binning = section.get("binning")
        parts = []
        if isinstance(binning, Mapping):
            parts.append(f"bins from {binning.get('source', 'unknown')}")
            if binning.get("thresholds"):
                parts.append(f"thresholds {', '.join(str(t) for t in binning['thresholds'])}")
            if isinstance(binning.get("items"), Mapping):
                parts.append("items per bin " + ", ".join(f"{b}: {k}" for b, k in
                                                          binning["items"].items()))
        elif binning is not None:
            parts.append(f"bins from {binning}")
        if section.get("budget") is not None:
            parts.append(f"budget: {section['budget']}")
        return _rows(rows), "; ".join(parts) or None
    return _rows(section), None


def _rows(rows: Any) -> list[Mapping[str, Any]]:
    """The rows that have their keys (others are skipped)."""
    if not isinstance(rows, list):
        return []
    return [r for r in rows if isinstance(r, Mapping) and {"bin", "n", "strategy"} <= r.keys()]


def difficulty_table(section: Any) -> dict[str, Any] | None:
    """{"bins": [...], "note", "rows": [{"strategy", "metric", "n", "cells": [{mean, stderr,
    items} or None per bin]}]} with rows sorted by (strategy, metric, n)."""
    rows, note = section_rows(section)
    if not rows:
        return None
    bins = _ordered(str(r["bin"]) for r in rows)
    cells: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        key = (str(r["strategy"]), str(r["metric"]), int(r["n"]))
        cells.setdefault(key, {})[str(r["bin"])] = {
            "mean": r.get("mean"), "stderr": r.get("stderr"), "items": r.get("items")}
    return {"bins": bins, "note": note, "rows": [
        {"strategy": s, "metric": m, "n": n, "cells": [by_bin.get(b) for b in bins]}
        for (s, m, n), by_bin in sorted(cells.items())]}


def compute_optimal_table(section: Any) -> dict[str, Any] | None:
    """{"ns": [...], "note", "rows": [{"bin", "cells": [{strategy, accuracy, stderr} or None
    per N]}]}: which strategy wins each (difficulty bin, budget N)."""
    rows, note = section_rows(section)
    if not rows:
        return None
    ns = sorted({int(r["n"]) for r in rows})
    by_bin: dict[str, dict[int, dict[str, Any]]] = {}
    for r in rows:
        by_bin.setdefault(str(r["bin"]), {})[int(r["n"])] = {
            "strategy": r["strategy"], "accuracy": r.get("accuracy"),
            "stderr": r.get("stderr")}
    return {"ns": ns, "note": note, "rows": [{"bin": b, "cells": [cells.get(n) for n in ns]}
                               for b, cells in by_bin.items()]}


def _ordered(values: Any) -> list[str]:
    return list(dict.fromkeys(values))
