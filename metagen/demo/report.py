"""The demo's outputs: a rich table, a PNG plot (matplotlib, Agg), and an atomic JSON file."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

LABELS = {"greedy": "greedy", "best_of_n": "best-of-N (ORM)",
          "self_consistency": "self-consistency", "weighted_vote": "weighted vote (ORM)",
          "mbr": "MBR", "step_beam": "step beam (PRM)", "dvts": "DVTS (PRM)",
          "rebase": "REBASE (PRM)", "mcts": "MCTS (PRM)", "best_first": "best-first (PRM)"}


def results_table(rows: Sequence[dict[str, Any]], title: str = "") -> Any:
    """A ``rich.table.Table`` of accuracy and compute per strategy and N."""
    from rich.table import Table

    table = Table(title=title or None)
    for col, justify in (("strategy", "left"), ("N", "right"), ("accuracy", "right"),
                         ("generated tokens", "right"), ("FLOPs", "right"),
                         ("seconds", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(LABELS.get(r["strategy"], r["strategy"]), str(r["n"]),
                      f"{100 * r['accuracy']:.1f}%", f"{r['generated_tokens']:,}",
                      f"{r['flops']:.3g}", f"{r['seconds']:.1f}")
    return table


def write_plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Accuracy against generated tokens (log x), one line per strategy; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for name in LABELS:
        pts = sorted((r["generated_tokens"], r["accuracy"], r["n"]) for r in rows
                     if r["strategy"] == name)
        if not pts:
            continue
        xs, ys = [max(p[0], 1) for p in pts], [100 * p[1] for p in pts]
        style: dict[str, Any] = {"marker": "o"}
        if name == "greedy":
            style = {"marker": "*", "markersize": 12, "linestyle": "none"}
        elif name == "mbr":  # equals self-consistency with the answer utility: keep both visible
            style = {"marker": "s", "markersize": 4, "linestyle": "--"}
        ax.plot(xs, ys, label=LABELS[name], **style)
        if name in ("step_beam", "dvts", "rebase", "mcts", "best_first"):
            style = {"marker": "^", "linestyle": ":"}
        if name == "self_consistency":
            for x, y, (_, _, n) in zip(xs, ys, pts):
                ax.annotate(f"N={n}", (x, y), textcoords="offset points", xytext=(0, -12),
                            fontsize=7, ha="center")
    ax.set_xscale("log")
    ax.set_xlabel("generated tokens (log scale)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title or "Test-time compute on the metagen testbed")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def write_json(report: dict[str, Any], path: str | Path) -> Path:
    """Write ``{"problems", "results"}`` atomically (temp file, fsync, rename)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"problems": report["problems"], "results": report["results"]}
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=out.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
