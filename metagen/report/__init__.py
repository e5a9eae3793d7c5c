"""metagen.report: run folders of ``metagen eval`` -> one self-contained HTML page.

- :mod:`~metagen.report.model` — :func:`build_report`: the JSON-able model (provenance, failure
  counts, curves against N / tokens / FLOPs / wall time with latency and throughput per point
  (:mod:`~metagen.report.latency`), difficulty and compute-optimal tables, per-item candidates,
  votes and search trees), capped by :class:`ReportLimits`.
- :mod:`~metagen.report.html` — :func:`render_html`: the page, data inline and escaped.
- :func:`write_report`: both, written atomically.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from metagen.report.html import render_html
from metagen.report.limits import ReportLimits
from metagen.report.model import build_report

__all__ = ["ReportLimits", "build_report", "render_html", "write_report"]


def write_report(folders: Sequence[str | Path], out: str | Path,
                 limits: ReportLimits | None = None, names: Sequence[str] | None = None
                 ) -> Path:
    """Write the page for run ``folders`` (shown as ``names``, default their folder names) to
    ``out`` (temp file + fsync + rename: a reader never sees a torn page). Raises
    ``InvalidParameterError`` naming ``dir`` for a folder that is not a run folder, before
    anything is written."""
    from metagen.eval.atomic import write_atomic

    page = render_html(build_report(folders, limits, names))
    return write_atomic(out, page.encode("utf-8"))
