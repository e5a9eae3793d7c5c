"""Run folders -> the report's JSON-able model: per run its task, provenance summary, failure
counts, curves (accuracy with compute and wall time per N), difficulty and compute-optimal
tables (when ``results.json`` has them) and per-item views (when the folder has its
``run.sqlite``).

Nothing in a run folder is written. A folder without ``results.json``, or one that is not a JSON
object, raises ``InvalidParameterError`` naming ``dir`` and the folder; an unreadable store
leaves the run without per-item view and says why (``items_note``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.eval.runner import RESULTS_NAME, STORE_NAME
from metagen.report.costs import run_costs
from metagen.report.curves import run_curves
from metagen.report.items import item_view
from metagen.report.latency import run_latency
from metagen.report.limits import ReportLimits
from metagen.report.store_reader import StoredRun, read_store
from metagen.report.summary import provenance_summary
from metagen.report.tables import compute_optimal_table, difficulty_table


def read_results(folder: str | Path) -> dict[str, Any]:
    """The ``results.json`` object of run folder ``folder``."""
    path = Path(folder) / RESULTS_NAME
    if not path.is_file():
        raise InvalidParameterError("dir", str(folder), f"has no {RESULTS_NAME} (not a "
                                    "metagen eval run folder, or the run never wrote one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidParameterError("dir", str(folder),
                                    f"its {RESULTS_NAME} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidParameterError("dir", str(folder), f"its {RESULTS_NAME} is not an object")
    return data


def build_report(folders: Sequence[str | Path], limits: ReportLimits | None = None,
                 names: Sequence[str] | None = None) -> dict[str, Any]:
    """The model of the page for ``folders`` (at least one), in the order given, each run
    shown as its entry of ``names`` (default: its folder's name). Every folder is checked
    (``read_results``) before any store is read."""
    if not folders:
        raise InvalidParameterError("dir", [], "give at least one run folder")
    if names is not None and len(names) != len(folders):
        raise InvalidParameterError("names", list(names), "must give one name per folder")
    limits = limits or ReportLimits()
    loaded = [(Path(f), read_results(f)) for f in folders]
    budget = [limits.max_detail_chars]  # item detail left for the whole page, in characters
    runs = [run_model(i, folder, results, limits, budget, names[i] if names else None)
            for i, (folder, results) in enumerate(loaded)]
    return {"runs": runs, "cuts": cuts(runs), "limits": asdict(limits)}


def cuts(runs: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """What the limits left out of ``runs`` (the page says so): items without detail, candidates
    not shown, texts cut (candidates, final texts, tree steps), tree nodes not shown."""
    out = {"items_without_detail": 0, "candidates_hidden": 0, "texts_cut": 0,
           "tree_nodes_hidden": 0}
    for run in runs:
        for item in run["items"]:
            if not item["detail"]:
                out["items_without_detail"] += 1
                continue
            out["candidates_hidden"] += item["candidates_total"] - len(item["candidates"])
            out["texts_cut"] += sum(c["text_cut"] for c in item["candidates"])
            for search in item["searches"]:
                out["tree_nodes_hidden"] += search["hidden_nodes"]
                out["texts_cut"] += search["text_cut"] + _steps_cut(search["tree"])
    return out


def _steps_cut(node: Mapping[str, Any]) -> int:
    return int(node["step_cut"]) + sum(_steps_cut(c) for c in node["children"])


def run_model(index: int, folder: Path, results: dict[str, Any], limits: ReportLimits,
              budget: list[int], name: str | None = None) -> dict[str, Any]:
    """One run of the model (see the module docstring). Items get their detail while fewer
    than ``limits.max_items`` of the run have it and ``budget[0]`` (characters of item detail
    left for the page; decreased here) is positive."""
    stored, note = _store(folder, limits.max_items)
    rows = [r for r in results.get("results") or []  # rows without their key are skipped
            if isinstance(r, dict) and {"strategy", "n", "metric"} <= r.keys()]
    key = _answer_key((results.get("config") or {}).get("task"))
    items = []
    for i, (item_id, difficulty) in enumerate(stored.items):
        view = item_view(item_id, difficulty, stored.samples.get(item_id, []),
                         stored.scores.get(item_id, {}), stored.results.get(item_id, []), key,
                         limits, detail=i < limits.max_items and budget[0] > 0)
        if view["detail"]:
            budget[0] -= len(json.dumps(view, ensure_ascii=False, default=str))
        items.append(view)
    return {"id": f"run{index}", "name": name or folder.resolve().name or str(folder),
            "path": str(folder), "summary": provenance_summary(results),
            "failures": dict(results.get("failures_by_reason") or {}),
            "failed_items": list(results.get("failed_items") or []),
            "task": (results.get("config") or {}).get("task"),
            "curves": run_curves(rows, run_costs(stored.samples, stored.results),
                                 run_latency(stored.results)),
            "by_difficulty": difficulty_table(results.get("by_difficulty")),
            "compute_optimal": compute_optimal_table(results.get("compute_optimal")),
            "items": items, "items_note": note}


def _store(folder: Path, text_items: int) -> tuple[StoredRun, str | None]:
    """The folder's store, texts of its first ``text_items`` items only (empty when absent or
    unreadable, with the reason)."""
    path = folder / STORE_NAME
    if not path.is_file():
        return StoredRun(), f"no {STORE_NAME} in this folder: per-item view unavailable"
    try:
        return read_store(path, text_items), None
    except sqlite3.Error as exc:
        return StoredRun(), f"{STORE_NAME} unreadable ({exc}): per-item view unavailable"


def _answer_key(task: Any) -> AnswerKey | None:
    from metagen.eval.tasks import TASKS

    return TASKS[task]().answer_key if isinstance(task, str) and task in TASKS else None
