"""What ``metagen report`` reads: each argument is a run folder (it holds ``results.json``), a
folder of run folders (a study's output root: every run folder under it, by path), or a study
file (``metagen eval --config``: its runs, in the file's order, every one of which must have
run). Each run gets a name: a run folder's own name, or its path under the root / the
study's output root (``testbed/policy/self_consistency/seed-0``)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from metagen.errors import InvalidParameterError
from metagen.eval.runner import RESULTS_NAME


def report_runs(paths: Sequence[str | Path]) -> list[tuple[str, Path]]:
    """(name, run folder) of every run the ``paths`` give, in the order given. A folder with
    no run folder under it is kept as given (the report then refuses it naming ``dir``)."""
    out: list[tuple[str, Path]] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            out += study_runs(path)
            continue
        found = run_folders(path) if path.is_dir() and not _is_run(path) else []
        out += ([(f.relative_to(path).as_posix(), f) for f in found] if found
                else [(path.resolve().name or str(path), path)])
    return out


def run_folders(root: Path) -> list[Path]:
    """The run folders under ``root`` (not ``root`` itself), sorted by path; a run folder's
    own subfolders are not searched."""
    found: list[Path] = []
    for folder, subfolders, _ in os.walk(root):
        subfolders.sort()
        here = Path(folder)
        if here != root and _is_run(here):
            found.append(here)
            subfolders.clear()
    return sorted(found, key=lambda f: f.relative_to(root).parts)


def study_runs(path: Path) -> list[tuple[str, Path]]:
    """(name, folder) of each run of the study file ``path`` (checked as ``metagen eval
    --config`` checks it); a run never started raises ``InvalidParameterError`` naming
    ``dir``."""
    from metagen.eval.study import load_study

    study = load_study(path)
    missing = [run for run in study.runs if not _is_run(run.folder)]
    if missing:
        raise InvalidParameterError("dir", str(path), f"{len(missing)} of {len(study.runs)} "
                                    f"runs of the study have no {RESULTS_NAME} (e.g. "
                                    f"{missing[0].name}): run metagen eval --config {path} "
                                    f"first, or report the runs done with their output root "
                                    f"{study.out}")
    return [(run.name, run.folder) for run in study.runs]


def _is_run(folder: Path) -> bool:
    return (folder / RESULTS_NAME).is_file()
