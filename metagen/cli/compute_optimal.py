"""``metagen compute-optimal DIR [DIR ...]``: fit a (difficulty bin, budget) -> strategy policy
on finished ``metagen eval`` runs of one task and items, and print it with its accuracy against
N on the held-out items next to each fixed strategy's (Snell et al. 2024). With ``--axis flops``
the runs may be of several models (``LABEL=DIR`` names one) and the policy chooses a (model,
strategy, N) per FLOPs budget (:mod:`metagen.frontier`)."""

from __future__ import annotations

from typing import Any

import click

from metagen.cli.flags import float_flag, int_flag
from metagen.errors import InvalidParameterError
from metagen.frontier.text import bin_table


@click.command("compute-optimal")
@click.argument("dirs", nargs=-1, required=True, metavar="[LABEL=]DIR...")
@click.option("--axis", default="n", show_default=True, metavar="n|flops|auto",
              help="Budget axis: n (samples per item, runs of one model) or flops (FLOPs per "
              "item; candidates are (model, strategy, N) of runs of several models, each "
              "labelled by its model folder's name or LABEL=DIR); auto: flops when the runs' "
              "models differ.")
@click.option("--budgets", default=None, metavar="F,F,...",
              help="FLOPs-per-item budgets (--axis flops); default 1/2/5 x powers of ten "
              "spanning the candidates' mean FLOPs.")
@click.option("--plot", "plot_path", default=None, metavar="PATH",
              help="Write a PNG of held-out accuracy against FLOPs (--axis flops).")
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
def compute_optimal_command(dirs: tuple[str, ...], axis: str, budgets: str | None,
                            plot_path: str | None, fit_fraction: str, split_seed: str,
                            difficulty: str, bins: str, min_gain_stderr: str,
                            json_path: str | None) -> None:
    """Fit and score a compute-optimal policy over the run folders DIR."""
    from metagen.compute_optimal import compute_optimal
    from metagen.eval.atomic import write_json_atomic
    from metagen.frontier import (frontier_curve_text, frontier_policy_text, frontier_report,
                                  parse_labelled, write_frontier_plot)

    entries = [parse_labelled(d) for d in dirs]
    common: dict[str, Any] = {
        "fit_fraction": _given(float_flag("fit_fraction", fit_fraction)),
        "split_seed": _given(int_flag("split_seed", split_seed)), "difficulty": difficulty,
        "bins": _given(int_flag("bins", bins)),
        "min_gain_stderr": _given(float_flag("min_gain_stderr", min_gain_stderr))}
    if _axis(axis, entries) == "flops":
        report = frontier_report(entries, budgets=_budgets(budgets), **common)
        texts = [frontier_policy_text(report), frontier_curve_text(report)]
    else:
        for flag, value in (("budgets", budgets), ("plot", plot_path)):
            if value is not None:
                raise InvalidParameterError(flag, value, "needs --axis flops")
        labelled = [text for text, (label, _) in zip(dirs, entries) if label is not None]
        if labelled:
            raise InvalidParameterError("label", labelled[0], "LABEL=DIR needs --axis flops")
        report = compute_optimal(list(dirs), **common)
        texts = [policy_text(report), curve_text(report)]
    if json_path is not None:
        write_json_atomic(json_path, report)
    if plot_path is not None:
        write_frontier_plot(report, plot_path)
    for text in texts:
        click.echo(text)


def _axis(axis: str, entries: list[tuple[str | None, str]]) -> str:
    """``n`` or ``flops`` (``auto``: flops when the entries' model labels differ);
    ``InvalidParameterError`` naming ``axis`` for any other value."""
    if axis not in ("n", "flops", "auto"):
        raise InvalidParameterError("axis", axis, "must be n, flops or auto")
    if axis == "auto":
        from metagen.frontier.candidates import model_labels

        return "flops" if len(set(model_labels(entries))) > 1 else "n"
    return axis


def _budgets(text: str | None) -> list[float] | None:
    """``--budgets`` as numbers (their checks are the report's); None when not given."""
    if text is None:
        return None
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidParameterError("budgets", text, "must be comma-separated numbers") from None


def policy_text(report: dict[str, Any]) -> str:
    """The policy as a table: one row per bin (easiest first, then ``*`` = any other bin),
    one column per budget N."""
    policy, split = report["policy"], report["split"]
    ns = sorted(int(n) for n in policy["overall"])
    cell = {(e["bin"], e["n"]): e["strategy"] for e in policy["table"]}
    binning = policy["binning"]
    return "\n".join([f"policy ({binning['source']} bins, fitted on {split['fit']} items; "
                      f"held out {split['held_out']}):",
                      *bin_table(binning["bins"], ns, [f"N={n}" for n in ns], cell,
                                 {n: policy["overall"][str(n)] for n in ns}, 18)])


def curve_text(report: dict[str, Any]) -> str:
    """Held-out accuracy against N: the policy, each fixed strategy, the gain over the best."""
    from metagen.frontier.text import pm

    rows = report["held_out"]
    names = sorted({s for r in rows for s in r["fixed"]})
    lines = [f"held-out accuracy ({rows[0]['items'] if rows else 0} items), mean ± stderr:",
             f"{'N':>5} {'policy':>16} " + " ".join(f"{s:>18}" for s in names)
             + f" {'gain vs best fixed':>24}  {'gain vs fit-split best':>24}"]
    for r in rows:
        fixed = " ".join(f"{pm(r['fixed'][s]):>18}" if s in r["fixed"] else f"{'-':>18}"
                         for s in names)
        vs_fit = r["gain_vs_fit_best"]
        lines.append(f"{r['n']:>5} {pm(r['policy']):>16} {fixed} "
                     f"{r['gain']:+.4f} ± {r['gain_stderr']:.4f} ({r['best_fixed']})  "
                     + (f"{vs_fit[0]:+.4f} ± {vs_fit[1]:.4f} ({r['fit_best']})" if vs_fit
                        else "-"))
    return "\n".join(lines)


def _given(value: Any) -> Any:
    if value is None:
        raise AssertionError("a flag with a default was None")
    return value
