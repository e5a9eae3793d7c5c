"""``metagen demo --scaling-laws``: the demo's runs for each size of the testbed's policy family,
then the compute-optimal frontier over sizes and strategies (:mod:`metagen.eval.scaling_laws`).
Prints each model's table and each run's time, writes the frontier's plot (``--plot``) and,
with ``--json``, ``{problems, models: {model: rows}, frontier}``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metagen.cli.flags import parse_ns
from metagen.errors import InvalidParameterError

FIT_FRACTION = 0.5  # of the items; the rest (~320 of the default 640) score the frontier


def scaling_laws_command(*, out: str, plot_path: str | None, json_path: str | None,
                         problems: int | None, ns: str | None, backend: str,
                         temperature: float, max_tokens: int, seed: int,
                         searches: tuple[str, ...], step_ns: str, confidence: bool,
                         reward: str | None, prm_kind: str, concurrency: int,
                         force_resume: bool, remote: dict[str, Any] | None) -> int:
    """Validate every flag and every model folder before any run, run the preset, print; the
    exit status (the runs' highest)."""
    from rich.console import Console

    from metagen.cli.demo import Bars, check_target
    from metagen.eval import demo as preset
    from metagen.eval import scaling_laws as scaling
    from metagen.eval.atomic import write_json_atomic
    from metagen.eval.table import curve_rows, results_table

    if remote:
        raise InvalidParameterError("base_url", remote["base_url"], "--scaling-laws samples "
                                    "from the local testbed family; drop --base-url")
    if confidence:
        raise InvalidParameterError("confidence", True, "each size's own confidence would be "
                                    "a different verifier; not with --scaling-laws")
    settings = scaling.scaling_settings(
        problems=scaling.SCALING_PROBLEMS if problems is None else problems,
        ns=scaling.SCALING_NS if ns is None else parse_ns(ns, "ns"),
        step_ns=parse_ns(step_ns, "step_ns"), step_search=searches or scaling.SCALING_SEARCHES,
        seed=seed, temperature=temperature, max_tokens=max_tokens, prm=prm_kind, reward=reward)
    models = scaling.family_models(backend)
    plot = Path(plot_path or Path(out) / scaling.SCALING_DIR / "frontier.png")
    for flag, target in (("plot", str(plot)), ("json", json_path)):
        check_target(flag, target)
    console = Console()
    with Bars(console) as bars:
        done = scaling.run_scaling(
            settings, out, models=models, plot_path=plot, concurrency=concurrency,
            force_resume=force_resume, loaders=preset.testbed_loaders(settings),
            load_generator=lambda name: preset.load_testbed_policy(backend, name),
            progress=bars.progress, frontier=scaling_frontier)
    rows = {name: curve_rows([report for report, _ in runs.values()])
            for name, runs in done.reports.items()}
    for name, runs in done.reports.items():
        console.print(results_table(rows[name], title=f"{name}: {settings.problems} held-out "
                                    f"testbed problems, T={temperature}"))
        for run, (report, _) in runs.items():
            acc = report["accounting"]
            console.print(f"run {scaling.scaling_folder(out, name) / run}: {report['status']}, "
                          f"{acc['done']} of {acc['n_items_total']} problems done, "
                          f"{scaling.run_seconds(report):.1f} s")
    if done.frontier is not None:
        console.print(done.frontier[1])
        console.print(f"plot: {plot}")
    if json_path:
        written = write_json_atomic(json_path, {
            "problems": settings.problems, "models": rows,
            "frontier": done.frontier[0] if done.frontier else None})
        console.print(f"json: {written}")
    return done.code


def scaling_frontier(run_folders: Mapping[str, Sequence[Path]], *, plot_path: Path
                     ) -> tuple[dict[str, Any], str]:
    """The compute-optimal frontier over ``run_folders`` (label = model name -> its run
    folders), fitted on :data:`FIT_FRACTION` of the items and scored on the rest; writes its
    plot at ``plot_path``; returns (the report, its text)."""
    from metagen.frontier import (frontier_curve_text, frontier_policy_text, frontier_report,
                                  write_frontier_plot)

    entries = [(label, folder) for label, folders in run_folders.items() for folder in folders]
    report = frontier_report(entries, fit_fraction=FIT_FRACTION)
    write_frontier_plot(report, plot_path, title="testbed: accuracy against FLOPs per item")
    return report, frontier_policy_text(report) + "\n" + frontier_curve_text(report)
