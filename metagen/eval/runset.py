"""Finished run folders (``results.json`` + ``run.sqlite``) read as ONE set of per-item rows, for
comparing their strategies item by item: several runs of different strategies on the same task
and items, or one run of several strategies.

Runs are refused (``InvalidParameterError`` naming ``runs``) unless they share the task, its data
(sha256) and prompt template, and the same done items; and unless each strategy comes from one
run only. Only ``accuracy`` rows are kept (``pass@k`` is the samples' oracle, not a strategy).
An item's pass@1 and mean reward score are averaged over the runs that stored samples / scores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.metrics import ACCURACY
from metagen.eval.runner import RESULTS_NAME, STORE_NAME
from metagen.eval.runrows import RunRows, read_run_rows
from metagen.eval.store import RunStore

SAME = ("task", "data_sha256", "prompt_template")  # config fields every run must share


def load_run(folder: str | Path) -> tuple[dict[str, Any], RunRows]:
    """(the run's results.json config, its :class:`RunRows`). A folder without both files
    raises ``InvalidParameterError`` naming ``runs``."""
    path = Path(folder)
    if not (path / RESULTS_NAME).is_file() or not (path / STORE_NAME).is_file():
        raise InvalidParameterError("runs", str(path), f"is not a finished run folder (needs "
                                    f"{RESULTS_NAME} and {STORE_NAME}; run metagen eval first)")
    try:
        config = dict(json.loads((path / RESULTS_NAME).read_text())["config"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError("runs", str(path), f"unreadable {RESULTS_NAME}: "
                                    f"{type(exc).__name__}: {exc}") from None
    with RunStore(path / STORE_NAME) as store:
        return config, read_run_rows(store)


def load_runs(folders: Sequence[str | Path]) -> RunRows:
    """The merged :class:`RunRows` of ``folders`` (see the module docstring for what is
    refused)."""
    if not folders:
        raise InvalidParameterError("runs", [], "give at least one run folder")
    loaded = [(str(f), *load_run(f)) for f in folders]
    first, config0, run0 = loaded[0]
    owner: dict[str, str] = {}
    for folder, config, run in loaded:
        for name in SAME:
            if config.get(name) != config0.get(name):
                raise InvalidParameterError("runs", folder, f"its {name} "
                                            f"{_short(config.get(name))} differs from "
                                            f"{_short(config0.get(name))} of {first}")
        if set(run.labels) != set(run0.labels):
            diff = sorted(set(run.labels) ^ set(run0.labels))
            raise InvalidParameterError("runs", folder, f"its done items differ from those "
                                        f"of {first} ({len(diff)} differ, e.g. {diff[0]!r}); "
                                        "finish both runs with the same --limit")
        for strategy in sorted({r[1] for r in run.rows if r[3] == ACCURACY}):
            if strategy in owner:
                raise InvalidParameterError("runs", folder, f"strategy {strategy} is also in "
                                            f"{owner[strategy]}; give each strategy once")
            owner[strategy] = folder
    runs = [run for _, _, run in loaded]
    return RunRows(tuple(r for run in runs for r in run.rows if r[3] == ACCURACY),
                   dict(run0.labels), _mean_over(runs, "pass1"), _mean_over(runs, "mean_score"),
                   {k: v for run in runs for k, v in run.tokens.items()})


def _mean_over(runs: Sequence[RunRows], field: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for run in runs:
        for item, v in getattr(run, field).items():
            values.setdefault(item, []).append(v)
    return {item: math.fsum(vs) / len(vs) for item, vs in values.items()}


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 else repr(value)
