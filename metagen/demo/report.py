"""The demo's outputs: a rich table, a PNG plot (matplotlib, Agg), and an atomic JSON file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metagen.eval.atomic import write_json_atomic

LABELS = {"greedy": "greedy", "best_of_n": "best-of-N (ORM)",
          "self_consistency": "self-consistency", "weighted_vote": "weighted vote (ORM)",
          "mbr": "MBR", "best_of_n_prm": "best-of-N (PRM, min)",
          "step_beam_search": "step beam (PRM)", "step_beam": "step beam (PRM)",
          "dvts": "DVTS (PRM)", "best_first": "best-first (PRM)", "mcts": "MCTS (PRM)",
          "rebase": "REBASE (PRM)", "best_of_n_confidence": "best-of-N (confidence)",
          "weighted_vote_confidence": "weighted vote (confidence)"}
SEARCHES = ("step_beam_search", "step_beam", "dvts", "best_first", "mcts", "rebase")
PANELS = (("generated_tokens", "generated tokens (log scale)"),
          ("flops", "FLOPs, generator + scorers (log scale)"))


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


def _style(name: str, index: int) -> dict[str, Any]:
    """Marker and line style by kind; colour by ``index`` in a 20-colour map, so more than ten
    strategies never share a colour."""
    return {"color": _COLORS[index % len(_COLORS)]} | _kind_style(name)


_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")


def _kind_style(name: str) -> dict[str, Any]:
    if name == "greedy":  # a single point: one marker, no line
        return {"marker": "*", "markersize": 12, "linestyle": "none", "color": "black"}
    if name == "mbr":  # equals self-consistency with the answer utility: keep both visible
        return {"marker": "s", "markersize": 4, "linestyle": "--"}
    if name == "best_of_n_prm":
        return {"marker": "D", "markersize": 4, "linestyle": "-."}
    if name in SEARCHES:
        return {"marker": "^", "linestyle": ":"}
    return {"marker": "o"}


def make_figure(rows: Sequence[dict[str, Any]], title: str = "") -> Any:
    """A matplotlib Figure with two panels side by side: accuracy against generated tokens and
    against FLOPs (both log x); one line per strategy with a marker at each N, greedy as a
    single marker. Strategies without a label are drawn under their own name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in LABELS if any(r["strategy"] == n for r in rows)]
    names += sorted({r["strategy"] for r in rows} - set(names))
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), dpi=110, sharey=True,
                             layout="constrained")
    for ax, (key, xlabel) in zip(axes, PANELS):
        for index, name in enumerate(names):
            pts = sorted((r[key], r["accuracy"], r["n"]) for r in rows if r["strategy"] == name)
            xs, ys = [max(p[0], 1) for p in pts], [100 * p[1] for p in pts]
            ax.plot(xs, ys, label=LABELS.get(name, name), **_style(name, index))
            if name == "self_consistency":
                for x, y, (_, _, n) in zip(xs, ys, pts):
                    ax.annotate(f"N={n}", (x, y), textcoords="offset points",
                                xytext=(0, -12), fontsize=7, ha="center")
        ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(True, which="both", alpha=0.3)
    top = max((100 * r["accuracy"] for r in rows), default=0.0)
    axes[0].set_ylim(0, min(100.0, max(10.0, 1.1 * top)))
    axes[0].set_ylabel("accuracy (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize=8)  # clear of the data
    fig.suptitle(title or "Test-time compute on the metagen testbed")
    return fig


def write_plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """Write :func:`make_figure`'s two panels (accuracy vs generated tokens and vs FLOPs, log x)
    as a PNG; returns the path."""
    import matplotlib.pyplot as plt

    fig = make_figure(rows, title)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def write_json(report: dict[str, Any], path: str | Path) -> Path:
    """Write ``{"problems", "results"}`` atomically (temp file, fsync, rename; strict JSON:
    unknown values such as NaN FLOPs are null)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return write_json_atomic(out, {"problems": report["problems"], "results": report["results"]})
