"""A finished run's curve as rows (accuracy and compute per strategy and N) and as a rich table.

:func:`curve_rows` reads ``results.json`` objects (one or several runs, e.g. the demo's parallel
run and its step-search run): per (strategy, N), the mean accuracy over items and its standard
error, and the run's compute at that N summed over items: generated tokens and FLOPs (NaN when a
backend could not count them). Sample-level metrics (pass@k) are left out: they are not a
strategy's choice.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from metagen.eval.cost import FLOPS, TOKENS
from metagen.eval.direct import ACCURACY

def label(strategy: str) -> str:
    """A strategy's display name: its spec's ``label`` (``greedy`` and names the registry does
    not know, e.g. of an older run, are shown as they are)."""
    from metagen.eval.catalog import eval_specs

    spec = eval_specs().get(strategy)
    return spec.label if spec is not None else strategy


def strategy_order() -> dict[str, int]:
    """Row order of the strategies: ``greedy``, then the registry's order."""
    from metagen.eval.catalog import GREEDY, eval_specs

    return {name: i for i, name in enumerate((GREEDY, *eval_specs()))}


def curve_rows(reports: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per (strategy, N) with an accuracy, in :func:`strategy_order` then by name and N:
    ``strategy``, ``n``, ``accuracy``, ``stderr``, ``items``, ``generated_tokens`` and
    ``flops`` (totals over the items: mean per item x items)."""
    rows: dict[tuple[str, int], dict[str, Any]] = {}
    for report in reports:
        for r in report["results"]:
            row = rows.setdefault((r["strategy"], r["n"]), {
                "strategy": r["strategy"], "n": r["n"], TOKENS: math.nan, FLOPS: math.nan})
            if r["metric"] == ACCURACY:
                row.update(accuracy=r["mean"], stderr=r["stderr"], items=r["items"])
            elif r["metric"] in (TOKENS, FLOPS):
                row[r["metric"]] = r["mean"] * r["items"]
    order = strategy_order()
    return sorted((r for r in rows.values() if "accuracy" in r),
                  key=lambda r: (order.get(r["strategy"], len(order)), r["strategy"], r["n"]))


def results_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """A ``rich.table.Table`` of :func:`curve_rows`: accuracy (± standard error across items),
    generated tokens and FLOPs per strategy and N; unknown compute is shown as ``?``."""
    from rich.table import Table

    table = Table(title=title or None)
    for col, justify in (("strategy", "left"), ("N", "right"), ("accuracy", "right"),
                         ("± s.e.", "right"), ("generated tokens", "right"),
                         ("FLOPs", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        tokens, flops = r[TOKENS], r[FLOPS]
        table.add_row(label(r["strategy"]), str(r["n"]),
                      f"{100 * r['accuracy']:.1f}%", f"{100 * r['stderr']:.1f}",
                      "?" if math.isnan(tokens) else f"{round(tokens):,}",
                      "?" if math.isnan(flops) else f"{flops:.3g}")
    return table
