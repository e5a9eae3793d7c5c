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
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.metrics import ACCURACY
from metagen.eval.runner import RESULTS_NAME, STORE_NAME
from metagen.eval.runrows import RunRows, read_run_rows
from metagen.eval.store import RunStore

SAME = ("task", "data_sha256", "prompt_template")  # config fields every run must share


def run_config(folder: str | Path) -> dict[str, Any]:
    """The run's results.json config. A folder without ``results.json`` and the store, or with
    an unreadable one, raises ``InvalidParameterError`` naming ``runs``."""
    path = Path(folder)
    if not (path / RESULTS_NAME).is_file() or not (path / STORE_NAME).is_file():
        raise InvalidParameterError("runs", str(path), f"is not a finished run folder (needs "
                                    f"{RESULTS_NAME} and {STORE_NAME}; run metagen eval first)")
    try:
        return dict(json.loads((path / RESULTS_NAME).read_text())["config"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidParameterError("runs", str(path), f"unreadable {RESULTS_NAME}: "
                                    f"{type(exc).__name__}: {exc}") from None


def load_run(folder: str | Path) -> tuple[dict[str, Any], RunRows]:
    """(the run's results.json config, its :class:`RunRows`); refused as :func:`run_config`
    refuses."""
    config = run_config(folder)
    with RunStore(Path(folder) / STORE_NAME) as store:
        return config, read_run_rows(store)


def load_matching(folders: Sequence[str | Path]) -> list[tuple[str, dict[str, Any], RunRows]]:
    """(folder, config, rows) of each of ``folders``, refused (``InvalidParameterError`` naming
    ``runs``) unless they share the task, its data, its prompt template and the done items."""
    if not folders:
        raise InvalidParameterError("runs", [], "give at least one run folder")
    loaded = [(str(f), *load_run(f)) for f in folders]
    first, config0, run0 = loaded[0]
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
    return loaded


def refuse_repeats(runs: Sequence[tuple[str, str, RunRows]]) -> None:
    """Refuse (``InvalidParameterError`` naming ``runs``) a strategy given twice within one
    group: ``runs`` holds (folder, group, rows), the group being ``""`` when all runs form one
    (one model) or the model's label when runs of several models are compared."""
    owner: dict[tuple[str, str], str] = {}
    for folder, group, run in runs:
        for strategy in sorted({r[1] for r in run.rows if r[3] == ACCURACY}):
            if (group, strategy) in owner:
                of = f" of model {group}" if group else ""
                raise InvalidParameterError("runs", folder, f"strategy {strategy}{of} is also "
                                            f"in {owner[(group, strategy)]}; give each "
                                            "strategy once")
            owner[(group, strategy)] = folder


def merge_rows(runs: Sequence[RunRows], metrics: Collection[str] = (ACCURACY,)) -> RunRows:
    """One :class:`RunRows` of ``runs`` (same done items), keeping the rows of ``metrics``; an
    item's pass@1 and mean score are averaged over the runs that have one."""
    run0 = runs[0]
    return RunRows(tuple(r for run in runs for r in run.rows if r[3] in metrics),
                   dict(run0.labels), mean_over(runs, "pass1"), mean_over(runs, "mean_score"),
                   {k: v for run in runs for k, v in run.tokens.items()})


def load_runs(folders: Sequence[str | Path]) -> RunRows:
    """The merged :class:`RunRows` of ``folders`` (see the module docstring for what is
    refused)."""
    loaded = load_matching(folders)
    refuse_repeats([(folder, "", run) for folder, _, run in loaded])
    return merge_rows([run for _, _, run in loaded])


def mean_over(runs: Sequence[RunRows], field: str) -> dict[str, float]:
    """item -> the mean of ``field`` over the runs that have a value for it."""
    values: dict[str, list[float]] = {}
    for run in runs:
        for item, v in getattr(run, field).items():
            values.setdefault(item, []).append(v)
    return {item: math.fsum(vs) / len(vs) for item, vs in values.items()}


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 else repr(value)
