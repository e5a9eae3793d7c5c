"""The two-panel PNG of a run's curve (matplotlib, Agg): accuracy against generated tokens and
against FLOPs, both log x, one line per strategy with a marker at each N, greedy a single star."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metagen.eval.cost import FLOPS, TOKENS
from metagen.eval.catalog import eval_specs
from metagen.eval.table import label

PANELS = ((TOKENS, "generated tokens (log scale)"),
          (FLOPS, "FLOPs, generator + scorers (log scale)"))
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78", "#98df8a", "#ff9896",
           "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5")


def style(name: str, index: int) -> dict[str, Any]:
    """Marker and line style by kind; colour by ``index`` in a 20-colour map, so more than ten
    strategies never share a colour."""
    if name == "greedy":  # a single point: one marker, no line
        return {"marker": "*", "markersize": 12, "linestyle": "none", "color": "black"}
    kind: dict[str, Any] = {"marker": "o"}
    if name == "mbr":  # equals self-consistency with the answer utility: keep both visible
        kind = {"marker": "s", "markersize": 4, "linestyle": "--"}
    else:  # by the spec's family: searches dotted triangles, refinements dash-dot diamonds
        family = spec.family if (spec := eval_specs().get(name)) is not None else None
        if family == "each_n":
            kind = {"marker": "^", "linestyle": ":"}
        elif family == "refinement":
            kind = {"marker": "D", "markersize": 4, "linestyle": "-."}
    return {"color": COLORS[index % len(COLORS)], **kind}


def make_figure(rows: Sequence[Mapping[str, Any]], title: str = "") -> Any:
    """A matplotlib Figure of :func:`~metagen.eval.table.curve_rows`: two panels side by side,
    accuracy against generated tokens and against FLOPs (points with unknown compute are left
    out of that panel)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r["strategy"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), dpi=110, sharey=True,
                             layout="constrained")
    for ax, (key, xlabel) in zip(axes, PANELS):
        for index, name in enumerate(names):
            pts = sorted((r[key], r["accuracy"], r["n"]) for r in rows
                         if r["strategy"] == name and not math.isnan(r[key]))
            xs, ys = [max(p[0], 1) for p in pts], [100 * p[1] for p in pts]
            ax.plot(xs, ys, label=label(name), **style(name, index))
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


def write_plot(rows: Sequence[Mapping[str, Any]], path: str | Path, title: str = "") -> Path:
    """Write :func:`make_figure` as a PNG at ``path`` (its folder created); returns the path."""
    return save_figure(make_figure(rows, title), path)


def save_figure(fig: Any, path: str | Path) -> Path:
    """Save matplotlib Figure ``fig`` as a PNG at ``path`` (its folder created), close it;
    returns the path."""
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
