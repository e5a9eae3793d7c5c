"""End to end on two small real runs of the testbed policy (self-consistency, and best-of-N with
the testbed ORM; same seed, so the same samples): results.json's difficulty tables agree with
its overall results, the held-out curve of ``metagen compute-optimal`` equals a recomputation
from the stores' raw rows, and mismatched runs are refused naming ``runs``."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from metagen.cli import main
from metagen.compute_optimal import compute_optimal, load_runs, split_items
from metagen.errors import InvalidParameterError

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "metagen" / "testbed" / "models"
LIMIT = 12


def _eval(out: Path, strategy: str, limit: int = LIMIT) -> Path:
    args = ["eval", "testbed", "--model", str(MODELS / "policy"), "--strategy", strategy,
            "--n", "1,2,4", "--limit", str(limit), "--seed", "5", "--max-tokens", "64",
            "--out", str(out)]
    if strategy != "self_consistency":
        args += ["--reward", str(MODELS / "orm")]
    assert main(args) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("copt")
    return _eval(root / "sc", "self_consistency"), _eval(root / "bon", "best_of_n")


def _raw_accuracy(folder: Path) -> dict[tuple[str, int], dict[str, float]]:
    with sqlite3.connect(folder / "run.sqlite") as db:
        rows = db.execute("SELECT item_id, strategy, n, value FROM results "
                          "WHERE metric='accuracy'").fetchall()
    out: dict[tuple[str, int], dict[str, float]] = {}
    for item, strategy, n, value in rows:
        out.setdefault((strategy, n), {})[item] = value
    return out


def _labels(folder: Path) -> dict[str, str]:
    with sqlite3.connect(folder / "run.sqlite") as db:
        return dict(db.execute("SELECT item_id, difficulty FROM items").fetchall())


def test_results_json_bins_by_task_difficulty_and_the_bins_add_up(runs):
    for folder in runs:
        report = json.loads((folder / "results.json").read_text())
        binning = report["by_difficulty"]["binning"]
        assert binning["source"] == "task" and sum(binning["items"].values()) == LIMIT
        assert set(binning["bins"]) == set(_labels(folder).values())
        for whole in report["results"]:
            key = (whole["strategy"], whole["n"], whole["metric"])
            parts = [r for r in report["by_difficulty"]["results"]
                     if (r["strategy"], r["n"], r["metric"]) == key]
            assert sum(p["items"] for p in parts) == whole["items"]
            assert math.isclose(sum(p["mean"] * p["items"] for p in parts),
                                whole["mean"] * whole["items"])
            assert all(p["tokens"] > 0 for p in parts)
        table = report["compute_optimal"]["table"]
        strategy = report["config"]["strategy"]
        assert {r["strategy"] for r in table} == {strategy}  # one strategy: a table anyway
        assert {(r["bin"], r["n"]) for r in table} == {
            (b, n) for b in [*binning["bins"], "all"] for n in (1, 2, 4)}


def test_the_held_out_curve_equals_a_recomputation_from_the_raw_rows(runs):
    report = compute_optimal(runs, fit_fraction=0.5, min_gain_stderr=0)
    acc = {**_raw_accuracy(runs[0]), **_raw_accuracy(runs[1])}
    labels = _labels(runs[0])
    _, held = split_items(sorted(labels), 0.5)
    cell = {(e["bin"], e["n"]): e["strategy"] for e in report["policy"]["table"]}
    assert [r["n"] for r in report["held_out"]] == [1, 2, 4]
    for row in report["held_out"]:
        n = row["n"]
        chosen = [cell.get((labels[i], n), report["policy"]["overall"][str(n)]) for i in held]
        mine = [acc[(s, n)][i] for s, i in zip(chosen, held)]
        assert math.isclose(row["policy"]["mean"], sum(mine) / len(held))
        for s in ("self_consistency", "best_of_n"):
            assert math.isclose(row["fixed"][s]["mean"],
                                sum(acc[(s, n)][i] for i in held) / len(held))
        best = max(row["fixed"].values(), key=lambda v: v["mean"])["mean"]
        assert math.isclose(row["gain"], row["policy"]["mean"] - best, abs_tol=1e-12)


def test_a_policy_that_never_trusts_a_bin_is_the_fit_splits_best_fixed_strategy(runs):
    report = compute_optimal(runs, min_gain_stderr=1e9)
    for row in report["held_out"]:
        overall = report["policy"]["overall"][str(row["n"])]
        assert row["policy"]["uses"] == {overall: row["items"]}
        assert row["policy"]["mean"] == row["fixed"][overall]["mean"]
        assert row["policy"]["tokens"] == row["fixed"][overall]["tokens"]


def test_the_cli_prints_the_policy_and_curve_and_writes_the_same_json(runs, tmp_path, capsys):
    path = tmp_path / "copt.json"
    assert main(["compute-optimal", *map(str, runs), "--fit-fraction", "0.5",
                 "--json", str(path)]) == 0
    printed = capsys.readouterr().out
    assert "policy (task bins" in printed and "held-out accuracy" in printed
    assert json.loads(path.read_text()) == json.loads(json.dumps(compute_optimal(runs)))


def test_mismatched_runs_are_refused_naming_runs(runs, tmp_path, capsys):
    sc, bon = runs
    cases = {"strategy self_consistency is also in": [sc, sc]}
    other_task = tmp_path / "other_task"
    shutil.copytree(sc, other_task)
    report = json.loads((other_task / "results.json").read_text())
    report["config"]["task"] = "gsm8k"
    (other_task / "results.json").write_text(json.dumps(report))
    cases["its task 'gsm8k' differs"] = [bon, other_task]
    other_data = tmp_path / "other_data"
    shutil.copytree(sc, other_data)
    report["config"] = {**report["config"], "task": "testbed", "data_sha256": "0" * 64}
    (other_data / "results.json").write_text(json.dumps(report))
    cases["its data_sha256 000000000000 differs"] = [bon, other_data]
    cases["is not a finished run folder"] = [bon, tmp_path / "missing"]
    cases["done items differ"] = [bon, _eval(tmp_path / "fewer", "self_consistency", 4)]
    for message, folders in cases.items():
        with pytest.raises(InvalidParameterError) as err:
            load_runs(folders)
        assert err.value.param == "runs" and message in str(err.value), str(err.value)
    capsys.readouterr()
    assert main(["compute-optimal", str(sc), str(sc)]) == 2
    assert capsys.readouterr().err.startswith("error: invalid runs=")
