"""The report's data model on hand-made runs (tests/report/runs.py), against values computed by
hand: curves and their compute, votes, chosen counts, trees and their cuts, the difficulty and
compute-optimal pivots, provenance; a folder that is not a run is refused naming it, and nothing
in a run folder is written."""

from __future__ import annotations

import json

import pytest

from metagen.errors import InvalidParameterError
from metagen.report import ReportLimits, build_report
from metagen.report.tables import compute_optimal_table, difficulty_table
from metagen.report.trees import display_tree
from tests.report.runs import (BY_DIFFICULTY, COMPUTE_OPTIMAL, HOSTILE, make_sc_run,
                               make_tree_run, tree)


@pytest.fixture
def sc(tmp_path):
    return make_sc_run(tmp_path / "sc")


def _item(run, item_id):
    return next(it for it in run["items"] if it["id"] == item_id)


def test_curve_points_are_the_summary_rows_with_their_tokens_per_item(sc):
    run = build_report([sc])["runs"][0]
    # item means: (0.5 + 0.0) / 2 at N=1, (1 + 0) / 2 at N=4; stderr = sd / sqrt(2) = 0.25 and 0.5
    # tokens: N x the mean over items of the item's mean sample tokens ((25 + 5) / 2 = 15)
    # wall time: items a and b took 2 s and 6 s (tests/report/test_latency.py pins the fields)
    time = {"seconds": 4.0, "p50": 4.0, "p90": pytest.approx(5.6), "throughput": 0.25}
    assert run["curves"] == [{"strategy": "self_consistency", "metric": "accuracy", "points": [
        {"n": 1, "mean": 0.25, "stderr": pytest.approx(0.25), "items": 2, "tokens": 15.0,
         "flops": None, **time},
        {"n": 4, "mean": 0.5, "stderr": pytest.approx(0.5), "items": 2, "tokens": 60.0,
         "flops": None, **time}]}]


def test_tree_strategy_compute_comes_from_each_runs_usage_and_unknown_flops_stay_unknown(
        tmp_path):
    run = build_report([make_tree_run(tmp_path / "t")])["runs"][0]
    (curve,) = run["curves"]
    assert [(p["n"], p["mean"], p["tokens"], p["flops"]) for p in curve["points"]] == [
        (2, 1.0, 40.0, 2.0e6 + 1000.0), (4, 0.0, 80.0, None)]  # N=4's generator FLOPs are NaN


def test_cost_rows_a_runner_records_give_the_compute_and_are_not_curves():
    from metagen.report.curves import run_curves

    rows = [{"strategy": "s", "n": 2, "metric": "accuracy", "mean": 0.5, "stderr": 0.1,
             "items": 3},
            {"strategy": "s", "n": 2, "metric": "generated_tokens", "mean": 12.5, "items": 3},
            {"strategy": "s", "n": 2, "metric": "flops", "mean": 7.0e9, "items": 3},
            {"strategy": "s", "n": 4, "metric": "accuracy", "mean": 0.75, "items": 3},
            {"strategy": "t", "n": 2, "metric": "accuracy", "mean": 0.25, "items": 3}]
    store_cost = {("s", 2): {"tokens": 99.0, "flops": None}, ("s", 4): {"tokens": 40.0,
                                                                        "flops": None}}
    assert [(c["strategy"], [(p["n"], p["tokens"], p["flops"]) for p in c["points"]])
            for c in run_curves(rows, store_cost)] == [
        ("s", [(2, 12.5, 7.0e9), (4, 40.0, None)]), ("t", [(2, None, None)])]


def test_cost_rows_in_the_store_are_not_item_outcomes():
    from metagen.report.items import outcomes

    assert outcomes([("s", 2, "accuracy", 1.0, {}), ("s", 2, "generated_tokens", 9.0, {}),
                     ("s", 2, "flops", 1e9, {})]) == {"s": {"n": 2, "value": 1.0}}


def test_candidates_carry_answer_correctness_scores_and_how_often_they_were_chosen(sc):
    item = _item(build_report([sc])["runs"][0], "a")
    assert item["difficulty"] == "easy" and item["outcomes"] == {
        "self_consistency": {"n": 4, "value": 1.0}}
    assert [(c["index"], c["answer"], c["correct"], c["tokens"], c["scores"])
            for c in item["candidates"]] == [
        (0, "3", True, 10, {"reward": 0.9}), (1, "3", True, 20, {"reward": 0.8}),
        (2, "5", False, 30, {"reward": 0.1}), (3, "7", False, 40, {"reward": 0.5})]
    assert item["candidates"][0]["chosen"] == [
        {"by": "self_consistency N=1", "times": 1, "of": 4},
        {"by": "self_consistency N=4", "times": 1, "of": 1}]
    assert item["candidates"][3]["chosen"] == [{"by": "self_consistency N=1", "times": 1, "of": 4}]
    assert item["candidates"][3]["text"] == HOSTILE  # stored and read back unchanged


def test_votes_group_answers_with_the_tasks_answer_key(sc):
    item = _item(build_report([sc])["runs"][0], "a")
    assert [(v["answer"], v["votes"], v["correct"], v["members"]) for v in item["votes"]] == [
        ("3", 2, True, [0, 1]), ("5", 1, False, [2]), ("7", 1, False, [3])]
    assert item["votes"][0]["scores"]["reward"] == pytest.approx(0.9 + 0.8)
    b = _item(build_report([sc])["runs"][0], "b")
    assert [(v["answer"], v["votes"]) for v in b["votes"]] == [("9", 4)]


def test_a_tree_item_shows_each_search_with_its_tree(tmp_path):
    item = build_report([make_tree_run(tmp_path / "t")])["runs"][0]["items"][0]
    assert [(s["n"], s["value"], s["tokens"], s["hidden_nodes"]) for s in item["searches"]] == [
        (2, 1.0, 40, 0), (4, 0.0, 80, 0)]
    root = item["searches"][1]["tree"]  # N=4's tree: node 4's step is the hostile text
    assert [c["id"] for c in root["children"]] == [1, 2]
    assert [(c["id"], c["step"], c["score"], c["terminal"])
            for c in root["children"][0]["children"]] == [
        (3, "#### 4", 0.9, True), (4, HOSTILE, 0.25, True)]
    assert root["children"][1]["pruned"] is True
    assert item["candidates"] == [] and item["votes"] is None


def test_display_tree_keeps_nodes_breadth_first_and_counts_the_rest():
    cut, dropped = display_tree(tree(), max_nodes=3, max_step_chars=4)
    assert dropped == 2 and [c["id"] for c in cut["children"]] == [1, 2]
    assert cut["children"][0]["children"] == [] and cut["children"][0]["hidden_children"] == 2
    assert (cut["children"][0]["step"], cut["children"][0]["step_cut"]) == ("2 + ", True)
    full, none = display_tree(tree(), max_nodes=100, max_step_chars=100)
    assert none == 0 and len(full["children"][0]["children"]) == 2


def test_limits_cut_items_candidates_and_texts_and_the_model_counts_what_was_cut(sc):
    model = build_report([sc], ReportLimits(max_items=1, max_candidates=2, max_text_chars=10))
    a, b = model["runs"][0]["items"]
    assert a["detail"] and not b["detail"] and "candidates" not in b
    assert [c["text"] for c in a["candidates"]] == ["1 + 2 = 3\n", "#### 3"]
    assert [c["text_cut"] for c in a["candidates"]] == [True, False]
    assert a["candidates_total"] == 4 and len(a["votes"]) == 3  # votes count every sample
    assert model["cuts"] == {"items_without_detail": 1, "candidates_hidden": 2, "texts_cut": 1,
                             "tree_nodes_hidden": 0}


@pytest.mark.parametrize("field", ["max_items", "max_candidates", "max_text_chars",
                                   "max_step_chars", "max_tree_nodes", "max_detail_chars"])
@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_limits_refuse_non_positive_integers_naming_the_field(field, bad):
    with pytest.raises(InvalidParameterError, match=field):
        ReportLimits(**{field: bad})


def test_the_detail_budget_is_shared_by_the_runs_of_the_page(sc, tmp_path):
    full = build_report([sc])["runs"][0]["items"][0]
    size = len(json.dumps(full, ensure_ascii=False))
    # room for one item: it is given in full, then the budget is spent for every run after it
    model = build_report([sc, make_sc_run(tmp_path / "sc2")], ReportLimits(max_detail_chars=size))
    assert [[it["detail"] for it in run["items"]] for run in model["runs"]] == [
        [True, False], [False, False]]
    assert model["runs"][0]["items"][0] == full
    assert model["cuts"]["items_without_detail"] == 3


def test_difficulty_and_compute_optimal_tables_pivot_the_rows():
    table = difficulty_table(BY_DIFFICULTY)
    assert table["bins"] == ["easy", "hard"]
    assert [(r["n"], [c and c["mean"] for c in r["cells"]]) for r in table["rows"]] == [
        (1, [0.5, 0.0]), (4, [1.0, None])]
    opt = compute_optimal_table(COMPUTE_OPTIMAL)
    assert opt["ns"] == [1, 4]
    assert [(r["bin"], [c and c["strategy"] for c in r["cells"]]) for r in opt["rows"]] == [
        ("easy", ["self_consistency", "best_of_n"]), ("hard", [None, "self_consistency"])]
    assert difficulty_table(None) is None and compute_optimal_table([]) is None


def test_sections_wrapped_in_an_object_give_the_same_pivot_and_describe_their_binning():
    wrapped = {"binning": {"source": "pass@1", "bins": ["easy", "hard"], "thresholds": [0.5],
                           "items": {"easy": 1, "hard": 1}}, "results": BY_DIFFICULTY}
    table = difficulty_table(wrapped)
    assert table["rows"] == difficulty_table(BY_DIFFICULTY)["rows"]
    assert table["note"] == "bins from pass@1; thresholds 0.5; items per bin easy: 1, hard: 1"
    opt = compute_optimal_table({"budget": "n (samples per item)", "binning": "pass@1",
                                 "table": COMPUTE_OPTIMAL})
    assert opt["rows"] == compute_optimal_table(COMPUTE_OPTIMAL)["rows"]
    assert opt["note"] == "bins from pass@1; budget: n (samples per item)"
    assert difficulty_table({"binning": None, "results": None}) is None


def test_sections_a_run_has_are_rendered_and_absent_ones_are_none(tmp_path):
    with_sections = make_sc_run(tmp_path / "with", {"by_difficulty": BY_DIFFICULTY,
                                                    "compute_optimal": COMPUTE_OPTIMAL})
    runs = build_report([with_sections, make_tree_run(tmp_path / "t")])["runs"]
    assert runs[0]["by_difficulty"] == difficulty_table(BY_DIFFICULTY)
    assert runs[0]["compute_optimal"] == compute_optimal_table(COMPUTE_OPTIMAL)
    assert runs[1]["by_difficulty"] is None and runs[1]["compute_optimal"] is None


def test_provenance_summary_and_failures(sc):
    run = build_report([sc])["runs"][0]
    summary = dict(run["summary"])
    assert summary["status"] == "complete" and summary["task"] == "testbed"
    assert summary["N"] == "1, 4" and summary["seed"] == "3"
    assert summary["sampling"] == "temperature=0.8, top_p=1.0, max_tokens=64"
    assert summary["items"] == "n_items_total 3, done 2, failed 1, skipped 0"
    assert summary["generated tokens"] == str(10 + 20 + 30 + 40 + 4 * 5)
    assert summary["started"] == "1970-01-01 00:00:00 UTC" and summary["run key"] == "f" * 16
    assert run["failures"] == {"empty": 2, "timeout": 1} and run["failed_items"] == ["c"]
    assert [it["id"] for it in run["items"]] == ["a", "b"]  # the failed item is not listed


def test_a_folder_without_results_json_is_refused_naming_it(tmp_path, sc):
    with pytest.raises(InvalidParameterError, match="dir=.*nothere.*results.json"):
        build_report([sc, tmp_path / "nothere"])
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "results.json").write_text("[1, 2")
    with pytest.raises(InvalidParameterError, match="bad.*unreadable"):
        build_report([tmp_path / "bad"])
    with pytest.raises(InvalidParameterError, match="dir"):
        build_report([])


def test_rows_missing_their_keys_are_skipped_not_fatal(sc):
    results = json.loads((sc / "results.json").read_text())
    results["results"] += [{"strategy": "x"}, "junk", {"strategy": "y", "n": 1,
                                                       "metric": "accuracy"}]
    results["by_difficulty"] = [{"bin": "easy"}, BY_DIFFICULTY[0]]
    (sc / "results.json").write_text(json.dumps(results))
    run = build_report([sc])["runs"][0]
    assert [c["strategy"] for c in run["curves"]] == ["self_consistency", "y"]
    assert run["curves"][1]["points"][0]["mean"] is None
    assert len(run["by_difficulty"]["rows"]) == 1


def test_a_run_without_its_store_has_curves_but_no_item_view(sc):
    (sc / "run.sqlite").unlink()
    run = build_report([sc])["runs"][0]
    assert run["items"] == [] and "no run.sqlite" in run["items_note"]
    assert [p["tokens"] for p in run["curves"][0]["points"]] == [None, None]


def test_building_a_report_writes_nothing_into_a_finished_run_folder(sc):
    before = {p.name: p.stat().st_mtime_ns for p in sc.iterdir()}
    build_report([sc])
    assert {p.name: p.stat().st_mtime_ns for p in sc.iterdir()} == before


def test_a_store_with_its_write_ahead_log_still_open_is_read_through_it(tmp_path):
    from metagen.eval.store import RunStore

    folder = make_sc_run(tmp_path / "sc")
    with RunStore(folder / "run.sqlite") as live:  # a run in progress holds the log open
        live.db.execute("PRAGMA wal_autocheckpoint=0")
        live.save_item("z", [], [], None, [], done=True, difficulty="new")
        assert (folder / "run.sqlite-wal").exists()
        ids = [it["id"] for it in build_report([folder])["runs"][0]["items"]]
    assert ids == ["a", "b", "z"]


def test_the_store_keeps_texts_only_for_the_items_shown_in_detail(sc):
    from metagen.report.store_reader import read_store

    run = read_store(sc / "run.sqlite", text_items=1)
    assert [s["text"] for s in run.samples["a"]][:2] == ["1 + 2 = 3\n#### 3", "#### 3"]
    assert [s["text"] for s in run.samples["b"]] == [""] * 4
    assert [s["tokens"] for s in run.samples["b"]] == [5] * 4  # tokens still count for curves
