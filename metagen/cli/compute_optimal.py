"""``metagen compute-optimal DIR [DIR ...]``: fit a (difficulty bin, budget) -> strategy policy
on finished ``metagen eval`` runs of one task and items, and print it with its accuracy against
N on the held-out items next to each fixed strategy's (Snell et al. 2024)."""

from __future__ import annotations

from typing import Any

import click

from metagen.cli.flags import float_flag, int_flag


@click.command("compute-optimal")
@click.argument("dirs", nargs=-1, required=True, metavar="DIR [DIR...]")
@click.option("--fit-fraction", default="0.5", show_default=True, metavar="F",
              help="Share of the items (by a hash of the item id) the policy is fitted on; "
              "the rest are held out.")
@click.option("--split-seed", default="0", show_default=True, help="Seed of the item split.")
@click.option("--difficulty", type=click.Choice(["auto", "task", "oracle", "predicted"]),
              default="auto", show_default=True,
              help="Bins: the task's labels (auto when every item has one), or quantiles of "
              "pass@1 (oracle: reads the grades) or of the mean reward score (predicted).")
@click.option("--bins", default="5", show_default=True, help="Quantile bins (oracle, predicted).")
@click.option("--min-gain-stderr", default="1.0", show_default=True, metavar="Z",
              help="A bin keeps its own winner only when it beats the overall winner on the "
              "bin's fit items by more than Z paired standard errors.")
@click.option("--json", "json_path", default=None, metavar="PATH",
              help="Also write the policy and curve as JSON (atomically).")
def compute_optimal_command(dirs: tuple[str, ...], fit_fraction: str, split_seed: str,
                            difficulty: str, bins: str, min_gain_stderr: str,
                            json_path: str | None) -> None:
    """Fit and score a compute-optimal policy over the run folders DIR."""
    from metagen.compute_optimal import compute_optimal
    from metagen.eval.atomic import write_json_atomic

    report = compute_optimal(list(dirs), fit_fraction=_given(float_flag("fit_fraction",
                                                                        fit_fraction)),
                             split_seed=_given(int_flag("split_seed", split_seed)),
                             difficulty=difficulty,  # type: ignore[arg-type]
                             bins=_given(int_flag("bins", bins)),
                             min_gain_stderr=_given(float_flag("min_gain_stderr",
                                                               min_gain_stderr)))
    if json_path is not None:
        write_json_atomic(json_path, report)
    click.echo(policy_text(report))
    click.echo(curve_text(report))


def policy_text(report: dict[str, Any]) -> str:
    """The policy as a table: one row per bin (easiest first, then ``*`` = any other bin),
    one column per budget N."""
    policy, split = report["policy"], report["split"]
    ns = sorted(int(n) for n in policy["overall"])
    cell = {(e["bin"], e["n"]): e["strategy"] for e in policy["table"]}
    binning = policy["binning"]
    lines = [f"policy ({binning['source']} bins, fitted on {split['fit']} items; "
             f"held out {split['held_out']}):",
             f"{'bin':>8} " + " ".join(f"{'N=' + str(n):>18}" for n in ns)]
    for b in binning["bins"]:
        if any((b, n) in cell for n in ns):
            lines.append(f"{b:>8} " + " ".join(f"{cell.get((b, n), '-'):>18}" for n in ns))
    lines.append(f"{'*':>8} " + " ".join(f"{policy['overall'][str(n)]:>18}" for n in ns))
    return "\n".join(lines)


def curve_text(report: dict[str, Any]) -> str:
    """Held-out accuracy against N: the policy, each fixed strategy, the gain over the best."""
    rows = report["held_out"]
    names = sorted({s for r in rows for s in r["fixed"]})
    lines = [f"held-out accuracy ({rows[0]['items'] if rows else 0} items), mean ± stderr:",
             f"{'N':>5} {'policy':>16} " + " ".join(f"{s:>18}" for s in names)
             + f" {'gain vs best fixed':>24}  {'gain vs fit-split best':>24}"]
    for r in rows:
        fixed = " ".join(f"{_pm(r['fixed'][s]):>18}" if s in r["fixed"] else f"{'-':>18}"
                         for s in names)
        vs_fit = r["gain_vs_fit_best"]
        lines.append(f"{r['n']:>5} {_pm(r['policy']):>16} {fixed} "
                     f"{r['gain']:+.4f} ± {r['gain_stderr']:.4f} ({r['best_fixed']})  "
                     + (f"{vs_fit[0]:+.4f} ± {vs_fit[1]:.4f} ({r['fit_best']})" if vs_fit
                        else "-"))
    return "\n".join(lines)


def _pm(stat: dict[str, float]) -> str:
    return f"{stat['mean']:.4f} ± {stat['stderr']:.4f}"


def _given(value: Any) -> Any:
    if value is None:
        raise AssertionError("a flag with a default was None")
    return value
