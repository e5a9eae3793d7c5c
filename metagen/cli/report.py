"""``metagen report DIR [DIR ...] --out FILE``: one self-contained HTML page for the run folders
``metagen eval`` wrote (curves, difficulty and compute-optimal tables, per-item candidates and
search trees). A DIR may also be a study's output root (every run folder under it) or its study
file (``metagen eval --config``; :mod:`metagen.report.sources`). A folder without
``results.json`` (and no run folder under it) is a one-line error naming it (exit 2), before
anything is written."""

from __future__ import annotations

from pathlib import Path

import click

from metagen.cli.flags import int_flag
from metagen.report.limits import ReportLimits

_DEFAULT = ReportLimits()


@click.command("report")
@click.argument("dirs", nargs=-1, required=True, metavar="DIR|STUDY.yaml [...]")
@click.option("--out", default="report.html", show_default=True, metavar="FILE",
              help="The HTML page to write.")
@click.option("--max-items", default=None, metavar="K",
              help=f"Items per run shown with their candidates and trees, the rest listed "
              f"[default: {_DEFAULT.max_items}].")
@click.option("--max-text-chars", default=None, metavar="C",
              help=f"Characters shown of each candidate and final text "
              f"[default: {_DEFAULT.max_text_chars}].")
def report(dirs: tuple[str, ...], out: str, max_items: str | None,
           max_text_chars: str | None) -> None:
    """Write one HTML page (no network needed to view it) for the eval run folders DIR (a run
    folder, a study's output root or its study file)."""
    from metagen.report import write_report
    from metagen.report.sources import report_runs

    given = {"max_items": int_flag("max_items", max_items),
             "max_text_chars": int_flag("max_text_chars", max_text_chars)}
    limits = ReportLimits(**{k: v for k, v in given.items() if v is not None})
    runs = report_runs([Path(d) for d in dirs])
    path = write_report([folder for _, folder in runs], out, limits,
                        [name for name, _ in runs])
    click.echo(f"wrote {path} ({path.stat().st_size // 1024} KiB, {len(runs)} run"
               f"{'s' if len(runs) > 1 else ''})")
