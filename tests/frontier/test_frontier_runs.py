"""End to end on real runs of two testbed model sizes (the draft and the policy; same items and
seed): ``metagen compute-optimal --axis flops`` writes a JSON whose choices keep within their
budgets on the fit split, whose frontier is undominated and whose held-out numbers equal a
recomputation from the stores' raw rows, and a PNG; bad input is refused naming the parameter."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

from metagen.cli import main
from metagen.compute_optimal import split_items
from metagen.errors import InvalidParameterError
from metagen.frontier import frontier_report

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "metagen" / "testbed" / "models"
LIMIT = 4


def _eval(out: Path, model: str) -> Path:
    assert main(["eval", "testbed", "--model", str(MODELS / model), "--strategy",
                 "self_consistency,best_of_n", "--reward", str(MODELS / "orm"), "--n", "1,2",
                 "--limit", str(LIMIT), "--seed", "5", "--max-tokens", "48",
                 "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("frontier")
    return _eval(root / "draft", "draft"), _eval(root / "policy", "policy")


def _raw(folder: Path, metric: str) -> dict[tuple[str, int], dict[str, float]]:
    with sqlite3.connect(folder / "run.sqlite") as db:
        rows = db.execute("SELECT item_id, strategy, n, value FROM results WHERE metric=?",
                          (metric,)).fetchall()
    out: dict[tuple[str, int], dict[str, float]] = {}
    for item, strategy, n, value in rows:
        out.setdefault((strategy, n), {})[item] = value
    return out


def test_the_cli_writes_a_json_within_budget_an_undominated_frontier_and_a_png(runs, tmp_path,
                                                                                capsys):
    draft, policy = runs
    path, png = tmp_path / "frontier.json", tmp_path / "frontier.png"
    assert main(["compute-optimal", str(draft), f"big={policy}", "--axis", "flops",
                 "--min-gain-stderr", "0", "--json", str(path), "--plot", str(png)]) == 0
    printed = capsys.readouterr().out
    assert "policy over (model, strategy, N)" in printed and "frontier (held out)" in printed
    report = json.loads(path.read_text())
    assert report == json.loads(json.dumps(frontier_report(
        [draft, ("big", policy)], min_gain_stderr=0)))
    assert [r["model"] for r in report["runs"]] == ["draft", "big"]
    cands = report["candidates"]
    assert set(cands) == {f"{m}/{s}@{n}" for m in ("draft", "big")
                          for s in ("self_consistency", "best_of_n") for n in (1, 2)}
    assert report["budgets"] == sorted(report["budgets"]) and report["held_out"]
    for entry in report["policy"]["overall"]:  # the fallback keeps within B on all fit items
        assert cands[entry["candidate"]]["fit_flops"] <= entry["budget"]
    fit, held = split_items(sorted(_raw(draft, "accuracy")[("best_of_n", 1)]))
    assert report["split"]["fit"] == len(fit) and report["split"]["held_out"] == len(held)
    raw = {**{(f"draft/{s}@{n}"): v for (s, n), v in _raw(draft, "accuracy").items()},
           **{(f"big/{s}@{n}"): v for (s, n), v in _raw(policy, "accuracy").items()}}
    flops = {**{(f"draft/{s}@{n}"): v for (s, n), v in _raw(draft, "flops").items()},
             **{(f"big/{s}@{n}"): v for (s, n), v in _raw(policy, "flops").items()}}
    for name, stat in cands.items():
        assert math.isclose(stat["mean"], sum(raw[name][i] for i in held) / len(held))
        assert math.isclose(stat["flops"], sum(flops[name][i] for i in held) / len(held))
        assert math.isclose(stat["fit_flops"], sum(flops[name][i] for i in fit) / len(fit))
    for row in report["held_out"]:  # one task bin per label here; the overall covers the rest
        assert sum(row["policy"]["uses"].values()) == len(held)
        allowed = [c for c in cands if cands[c]["fit_flops"] <= row["budget"]]
        assert row["best_fixed"] in allowed
        assert cands[row["best_fixed"]]["mean"] == max(cands[c]["mean"] for c in allowed)
    front = report["frontier"]
    for name in front:
        x, y = cands[name]["flops"], cands[name]["mean"]
        assert not any(o["flops"] <= x and o["mean"] >= y and (o["flops"] < x or o["mean"] > y)
                       for other, o in cands.items() if other != name)
    cheapest = min(cands, key=lambda c: (cands[c]["flops"], -cands[c]["mean"]))
    assert cheapest in front
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bin_choices_keep_within_the_budget_on_their_bins_fit_items(runs):
    draft, policy = runs
    report = frontier_report([draft, policy], fit_fraction=0.75, min_gain_stderr=0)
    flops = {**{(f"draft/{s}@{n}"): v for (s, n), v in _raw(draft, "flops").items()},
             **{(f"policy/{s}@{n}"): v for (s, n), v in _raw(policy, "flops").items()}}
    with sqlite3.connect(draft / "run.sqlite") as db:
        labels = dict(db.execute("SELECT item_id, difficulty FROM items").fetchall())
    fit, _ = split_items(sorted(labels), 0.75)
    overall = {e["budget"]: e["candidate"] for e in report["policy"]["overall"]}
    for entry in report["policy"]["table"]:
        if entry["candidate"] != overall[entry["budget"]]:
            members = [i for i in fit if labels[i] == entry["bin"]]
            spent = sum(flops[entry["candidate"]][i] for i in members) / len(members)
            assert spent <= entry["budget"]


def test_bad_input_is_refused_naming_the_parameter(runs, tmp_path, capsys):
    draft, policy = runs
    fewer = tmp_path / "fewer"
    shutil.copytree(draft, fewer)
    with sqlite3.connect(fewer / "run.sqlite") as db:
        db.execute("DELETE FROM items WHERE item_id = (SELECT MIN(item_id) FROM items)")
    cases = {("runs", "done items differ"): [draft, fewer],
             ("runs", "strategy best_of_n of model draft is also in"): [draft, draft]}
    for (param, message), entries in cases.items():
        with pytest.raises(InvalidParameterError) as err:
            frontier_report(entries)
        assert err.value.param == param and message in str(err.value), str(err.value)
    frontier_report([("a", draft), ("b", draft)])  # one folder under two labels: two models
    capsys.readouterr()
    for args, param in ((["--axis", "tokens"], "axis"), (["--budgets", "1e9,0"], "budgets"),
                        (["--budgets", "1e9,x"], "budgets"), (["--plot", "x.png"], "plot")):
        flops = [] if param in ("axis", "plot") else ["--axis", "flops"]
        assert main(["compute-optimal", str(draft), str(policy), *args, *flops]) == 2
        assert capsys.readouterr().err.startswith(f"error: invalid {param}="), args
    assert main(["compute-optimal", str(draft), f"={policy}", "--axis", "flops"]) == 2
    assert capsys.readouterr().err.startswith("error: invalid label=")
    assert main(["compute-optimal", str(draft), f"big={policy}"]) == 2  # labels need flops
    assert capsys.readouterr().err.startswith("error: invalid label=")
    assert main(["compute-optimal", str(draft), str(policy), "--axis", "auto"]) == 0
    assert "policy over (model, strategy, N)" in capsys.readouterr().out
