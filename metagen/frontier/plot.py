"""The PNG of a :func:`~metagen.frontier.report.frontier_report` (matplotlib, Agg): held-out
accuracy (with stderr bars) against mean FLOPs per item on a log x axis, one line per (model,
strategy) over N: colour by strategy (greedy black), marker and line style by model, so a
strategy's curves for the several sizes read as one family; the Pareto frontier as a thick grey
line under them, the policy's point at each budget as a black cross.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metagen.eval.plot import COLORS, save_figure
from metagen.eval.table import label

#: (marker, line style) per model, in the order the models first appear
MODEL_STYLES = (("s", ":"), ("o", "--"), ("D", "-"), ("^", "-."), ("v", (0, (1, 1))),
                ("P", (0, (5, 1))))


def make_frontier_figure(report: dict[str, Any], title: str = "") -> Any:
    """A matplotlib Figure of ``report`` (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stats = report["candidates"]
    lines = list(dict.fromkeys((s["model"], s["strategy"]) for s in stats.values()))
    fig, ax = plt.subplots(figsize=(10, 5.5), dpi=110, layout="constrained")
    front = [stats[n] for n in report["frontier"]]
    ax.plot([s["flops"] for s in front], [100 * s["mean"] for s in front], color="#bbbbbb",
            linewidth=6, alpha=0.6, marker="o", markersize=14, zorder=1,
            label="frontier (held out)")
    models = list(dict.fromkeys(model for model, _ in lines))
    strategies = list(dict.fromkeys(strategy for _, strategy in lines if strategy != "greedy"))
    for model, strategy in lines:
        pts = sorted((s["flops"], 100 * s["mean"], 100 * s["stderr"]) for s in stats.values()
                     if (s["model"], s["strategy"]) == (model, strategy))
        marker, line = MODEL_STYLES[models.index(model) % len(MODEL_STYLES)]
        kind: dict[str, Any] = {"marker": marker, "linestyle": line, "color": "black"}
        if strategy == "greedy":  # one point per model
            kind.update(linestyle="none", markersize=9)
        else:
            kind["color"] = COLORS[strategies.index(strategy) % len(COLORS)]
        ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts],
                    capsize=2, zorder=2, label=f"{model} {label(strategy)}", **kind)
    rows = report["held_out"]
    ax.plot([r["policy"]["flops"] for r in rows], [100 * r["policy"]["mean"] for r in rows],
            marker="X", markersize=9, linestyle="none", color="black", zorder=3,
            label="policy per budget (held out)")
    ax.set_xscale("log")
    ax.set_xlabel("mean FLOPs per item, generator + scorers (log scale)")
    top = max((100 * (s["mean"] + s["stderr"]) for s in stats.values()), default=0.0)
    ax.set_ylim(0, min(100.0, max(10.0, 1.1 * top)))
    ax.set_ylabel("held-out accuracy (%)")
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside right upper", fontsize=8)  # clear of the data
    fig.suptitle(title or "Compute-optimal frontier over model, strategy and N")
    return fig


def write_frontier_plot(report: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Write :func:`make_frontier_figure` as a PNG at ``path`` (its folder created); returns
    the path."""
    return save_figure(make_frontier_figure(report, title), path)
