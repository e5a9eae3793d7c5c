"""The report page in a real headless Chromium: it loads without console or page errors, the
curves are drawn with one point per N (or said to be not recorded), clicking an item shows its
candidates and votes, a tree item's search tree expands and collapses, hostile model text is
shown literally and runs nothing, the sections a run has are rendered, the cuts are said."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from metagen.report import ReportLimits, write_report
from tests.report.runs import (BY_DIFFICULTY, COMPUTE_OPTIMAL, HOSTILE, make_sc_run,
                               make_tree_run, read_json)

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "metagen" / "testbed" / "models"


@pytest.fixture
def report(tmp_path):
    sc = make_sc_run(tmp_path / "sc", {"by_difficulty": BY_DIFFICULTY,
                                       "compute_optimal": COMPUTE_OPTIMAL})
    return write_report([sc, make_tree_run(tmp_path / "tree")], tmp_path / "report.html")


def _points(d: str) -> int:
    return len(re.findall(r"[ML]", d))


def _open_item(p, run: str, item: str):
    p.locator(f'.run-items[data-run="{run}"] tr.item-row[data-item="{item}"]').click()
    return p.locator(f'.run-items[data-run="{run}"] [data-testid="item-detail"]')


def test_the_page_loads_without_console_or_page_errors(page, report):
    p = page.open(report)
    assert p.title() == "metagen report"
    assert p.locator(".run[data-run]").count() == 2
    assert page.errors == []


def test_each_run_and_strategy_is_one_curve_with_a_point_per_recorded_n(page, report):
    p = page.open(report)
    expect = {"n": {"run0": 2, "run1": 2}, "tokens": {"run0": 2, "run1": 2},
              "flops": {"run1": 1}}  # sc records no FLOPs; the tree run's N=4 FLOPs are NaN
    for axis, per_run in expect.items():
        chart = p.locator(f'.chart[data-axis="{axis}"]')
        series = chart.locator("g.series")
        got = {}
        for i in range(series.count()):
            g = series.nth(i)
            d = g.locator("path.curve").get_attribute("d")
            assert _points(d) == int(g.locator("path.curve").get_attribute("data-points"))
            assert g.locator(".marker").count() == g.locator("line.errbar").count() == _points(d)
            got[g.get_attribute("data-run")] = _points(d)
        assert got == per_run, axis
    note = p.locator('.chart[data-axis="flops"] [data-testid="not-recorded"]').text_content()
    assert "not recorded for sc · self_consistency" in note
    assert page.errors == []


def test_error_bars_span_one_standard_error(page, report):
    p = page.open(report)
    g = p.locator('.chart[data-axis="n"] g.series[data-run="run0"]')
    # sc's points: 0.25 +- 0.25 and 0.5 +- 0.5; bars are drawn in pixels on one y scale
    bars = [(float(b.get_attribute("y1")), float(b.get_attribute("y2")))
            for b in g.locator("line.errbar").all()]
    ys = [float(c.get_attribute("cy")) for c in g.locator("circle.marker").all()]  # run0: circles
    (lo1, hi1), (lo2, hi2) = bars
    assert lo1 - ys[0] == pytest.approx(ys[0] - hi1)
    assert (lo2 - hi2) == pytest.approx(2 * (lo1 - hi1))
    assert lo1 == pytest.approx(lo2)  # both bars reach down to accuracy 0


def test_clicking_an_item_shows_its_candidates_and_votes(page, report):
    p = page.open(report)
    assert p.locator('[data-testid="item-detail"]:visible').count() == 0
    detail = _open_item(p, "run0", "a")
    rows = detail.locator('[data-testid="candidates"] tr.candidate')
    assert rows.count() == 4
    assert [rows.nth(i).locator("td").nth(1).text_content() for i in range(4)] == \
        ["3", "3", "5", "7"]
    assert [rows.nth(i).locator("td").nth(2).text_content() for i in range(4)] == \
        ["yes", "yes", "no", "no"]
    assert rows.nth(0).locator("td").nth(5).text_content() == "reward 0.900"
    assert "self_consistency N=4: 1/1" in rows.nth(0).locator("td").nth(6).text_content()
    votes = detail.locator('[data-testid="votes"] tbody tr')
    assert [votes.nth(i).locator("td").nth(1).text_content() for i in range(3)] == \
        ["2", "1", "1"]
    detail = _open_item(p, "run0", "b")  # another item replaces the first
    assert detail.locator("tr.candidate").count() == 4 and detail.get_attribute("data-item") == "b"
    assert page.errors == []


def test_hostile_model_text_is_shown_literally_and_runs_nothing(page, report):
    p = page.open(report)
    detail = _open_item(p, "run0", "a")
    cell = detail.locator('tr.candidate[data-index="3"] td').nth(7)
    assert cell.locator("pre").text_content() == HOSTILE  # lone surrogate included
    tree_detail = _open_item(p, "run1", "a")
    step = tree_detail.locator('[data-testid="search"][data-n="4"] li[data-node-id="4"] > .step')
    assert step.text_content() == HOSTILE.rstrip("\n")
    assert p.evaluate("window.__pwned") is None
    assert p.locator("img").count() == 0 and p.locator("main b").count() == 0
    assert p.locator("script").count() == 2
    assert page.errors == []


def test_a_tree_item_shows_its_tree_which_expands_and_collapses(page, report):
    p = page.open(report)
    detail = _open_item(p, "run1", "a")
    searches = detail.locator('[data-testid="search"]')
    assert searches.count() == 2
    search = detail.locator('[data-testid="search"][data-n="2"]')
    node1 = search.locator('li[data-node-id="1"]')
    leaf = search.locator('li[data-node-id="3"]')
    assert search.locator('li[data-node-id="2"]').is_visible()  # the root starts open
    assert node1.locator("> .step").text_content() == "2 + 2 = 4"
    assert "score 0.750" in node1.locator("> .meta").text_content()
    assert not leaf.is_visible()  # deeper levels start closed
    node1.locator("> button.toggle").click()
    assert leaf.is_visible() and "terminal" in leaf.locator("> .meta").text_content()
    node1.locator("> button.toggle").click()
    assert not leaf.is_visible()
    search.locator('[data-testid="expand-all"]').click()
    assert leaf.is_visible() and search.locator('li[data-node-id="4"]').is_visible()
    search.locator('[data-testid="collapse-all"]').click()
    assert not search.locator('li[data-node-id="1"]').is_visible()
    assert "pruned" in search.locator('li[data-node-id="2"]').get_attribute("class")
    assert page.errors == []


def test_difficulty_and_compute_optimal_tables_are_rendered_when_present(page, report):
    p = page.open(report)
    diff = p.locator('[data-testid="difficulty-table"] tbody tr')
    assert diff.count() == 2
    assert [c.text_content() for c in diff.nth(0).locator("td").all()] == [
        "self_consistency", "accuracy", "1", "0.500 ± 0 (1)", "0 ± 0 (1)"]
    opt = p.locator('[data-testid="optimal-table"] tbody tr')
    assert [c.text_content() for c in opt.nth(0).locator("td").all()] == [
        "easy", "self_consistency (0.500)", "best_of_n (1)"]
    assert p.locator("#difficulty-body").text_content().count("No difficulty breakdown") == 1
    assert page.errors == []


def test_the_page_says_what_its_limits_cut(page, tmp_path):
    out = write_report([make_sc_run(tmp_path / "sc")], tmp_path / "r.html",
                       ReportLimits(max_items=1, max_candidates=2, max_text_chars=10))
    p = page.open(out)
    note = p.locator('[data-testid="cut-note"]').text_content()
    assert "1 items listed without candidates" in note and "2 candidates not shown" in note
    assert "1 texts cut (at 10 characters" in note
    detail = _open_item(p, "run0", "a")
    assert "Showing the first 2 of 4 candidates" in detail.text_content()
    assert "(cut at 10 characters)" in detail.locator("tr.candidate").first.text_content()
    assert "Details not included" in _open_item(p, "run0", "b").text_content()
    assert page.errors == []


def _eval(out: Path, *args: str) -> Path:
    cmd = [sys.executable, "-m", "metagen", "eval", "testbed", "--model", str(MODELS / "policy"),
           "--seed", "1", "--max-tokens", "48", "--out", str(out), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


@pytest.mark.slow
def test_a_report_of_real_eval_runs_renders_their_curves_and_trees(page, tmp_path):
    sc = _eval(tmp_path / "sc", "--strategy", "self_consistency", "--n", "1,2,4", "--limit", "3")
    beam = _eval(tmp_path / "beam", "--strategy", "step_beam_search", "--prm",
                 str(MODELS / "prm"), "--n", "1,2", "--limit", "2")
    p = page.open(write_report([sc, beam], tmp_path / "r.html"))
    chart = p.locator('.chart[data-axis="n"]')
    for run, folder in (("run0", sc), ("run1", beam)):
        rows = read_json(folder / "results.json")["results"]
        for strategy in {r["strategy"] for r in rows}:
            path = chart.locator(f'g.series[data-run="{run}"][data-strategy="{strategy}"] '
                                 "path.curve")
            assert _points(path.get_attribute("d")) == \
                len({r["n"] for r in rows if r["strategy"] == strategy})  # cost rows: no curve
    assert p.locator('.chart[data-axis="flops"] g.series[data-run="run1"]').count() == 1
    first = p.locator('.run-items[data-run="run0"] tr.item-row').first.get_attribute("data-item")
    assert _open_item(p, "run0", first).locator("tr.candidate").count() == 4  # max N samples
    first = p.locator('.run-items[data-run="run1"] tr.item-row').first.get_attribute("data-item")
    tree = _open_item(p, "run1", first).locator('[data-testid="search"][data-n="2"] ul.tree')
    assert tree.locator("li.node").count() > 2  # root, its expansions and their steps
    assert page.errors == []
