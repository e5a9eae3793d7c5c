"""Text tables of a :func:`~metagen.frontier.report.frontier_report`: the policy (rows: bins,
columns: budgets, cells ``model/strategy@N``) and the held-out curve per budget."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def bin_table(bins: Sequence[str], columns: Sequence[Any], heads: Sequence[str],
              cell: Mapping[tuple[str, Any], str], overall: Mapping[Any, str],
              width: int) -> list[str]:
    """Lines of a (bin x column) table of choices: a header of ``heads``, one row per bin with
    a cell in some column (``-`` where none), then ``*``, the ``overall`` choice of any other
    bin; cells right-aligned to ``width``."""
    lines = [f"{'bin':>8} " + " ".join(f"{h:>{width}}" for h in heads)]
    for b in bins:
        if any((b, c) in cell for c in columns):
            lines.append(f"{b:>8} " + " ".join(f"{cell.get((b, c), '-'):>{width}}"
                                               for c in columns))
    lines.append(f"{'*':>8} " + " ".join(f"{overall[c]:>{width}}" for c in columns))
    return lines


def frontier_policy_text(report: dict[str, Any]) -> str:
    """The policy as a table: one row per bin (easiest first), then ``*`` (the overall choice,
    any other bin), one column per fitted budget."""
    policy, split = report["policy"], report["split"]
    budgets = [e["budget"] for e in policy["overall"]]
    cell = {(e["bin"], e["budget"]): e["candidate"] for e in policy["table"]}
    overall = {e["budget"]: e["candidate"] for e in policy["overall"]}
    width = max([12, *(len(c) for c in [*cell.values(), *overall.values()])])
    binning = policy["binning"]
    lines = [f"policy over (model, strategy, N) by FLOPs per item ({binning['source']} bins, "
             f"fitted on {split['fit']} items; held out {split['held_out']}):",
             *bin_table(binning["bins"], budgets, ["<=" + format(b, ".3g") for b in budgets],
                        cell, overall, width)]
    if report["unfitted"]:
        lines.append("budgets allowing no candidate: "
                     + ", ".join(format(b, ".3g") for b in report["unfitted"]))
    return "\n".join(lines)


def frontier_curve_text(report: dict[str, Any]) -> str:
    """Held-out accuracy per budget: the policy (with its mean FLOPs per item), the best fixed
    candidate (chosen on the held-out items) and the fit split's fixed choice, with the paired
    gains; then the frontier."""
    rows = report["held_out"]
    lines = [f"held-out accuracy ({rows[0]['items'] if rows else 0} items), mean ± stderr:",
             f"{'budget':>8} {'policy':>16} {'policy FLOPs':>12}  {'gain vs best fixed':<40}"
             f"  gain vs fit-split fixed"]
    for r in rows:
        vs_fit = r["gain_vs_fit_best"]
        lines.append(f"{r['budget']:>8.3g} {pm(r['policy']):>16} {r['policy']['flops']:>12.4g}"
                     f"  {_gain(r['gain'], r['gain_stderr'], r['best_fixed']):<40}"
                     f"  {_gain(vs_fit[0], vs_fit[1], r['fit_best'])}")
    stats = report["candidates"]
    lines.append("frontier (held out): " + ", ".join(
        f"{n} {stats[n]['mean']:.3f} at {stats[n]['flops']:.3g}" for n in report["frontier"]))
    return "\n".join(lines)


def pm(stat: dict[str, Any]) -> str:
    """``mean ± stderr`` of a stat dict."""
    return f"{stat['mean']:.4f} ± {stat['stderr']:.4f}"


def _gain(mean: float, err: float, name: str) -> str:
    return f"{mean:+.4f} ± {err:.4f} ({name})"
