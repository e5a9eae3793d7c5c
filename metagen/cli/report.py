"""``metagen report DIR [DIR ...] --out FILE``: one self-contained HTML page for the run folders
``metagen eval`` wrote (curves, difficulty and compute-optimal tables, per-item candidates and
search trees). A folder without ``results.json`` is a one-line error naming it (exit 2), before
anything is written."""

from __future__ import annotations

from pathlib import Path

import click

from metagen.cli.flags import int_flag


@click.command("report")
@click.argument("dirs", nargs=-1, required=True, metavar="DIR [DIR ...]")
@click.option("--out", default="report.html", show_default=True, metavar="FILE",
              help="The HTML page to write.")
@click.option("--max-items", default="300", show_default=True, metavar="K",
              help="Items per run shown with their candidates and trees (the rest are listed).")
@click.option("--max-text-chars", default="2000", show_default=True, metavar="C",
              help="Characters shown of each candidate and final text.")
def report(dirs: tuple[str, ...], out: str, max_items: str, max_text_chars: str) -> None:
    """Write one HTML page (no network needed to view it) for the eval run folders DIR."""
    from metagen.report import ReportLimits, write_report

    # flags with a default are never None; ReportLimits refuses 0 naming the flag
    limits = ReportLimits(max_items=int_flag("max_items", max_items) or 0,
                          max_text_chars=int_flag("max_text_chars", max_text_chars) or 0)
    path = write_report([Path(d) for d in dirs], out, limits)
    click.echo(f"wrote {path} ({path.stat().st_size // 1024} KiB, {len(dirs)} run"
               f"{'s' if len(dirs) > 1 else ''})")
