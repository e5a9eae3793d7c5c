"""The report's layout as a person sees it, checked on screenshots and on the boxes the browser
laid out (1280 x 800 viewport): the first screen shows the results, not run details; one chart per
task and quantity, with a run's curves only in its task's charts; two identical runs stay told
apart; no two axis tick labels overlap, FLOPs over decades included; the candidates' text column
is wide; the results table carries latency and throughput next to accuracy and compute."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from metagen.report import write_report
from tests.report.runs import make_sc_run, make_scaling_run, make_tree_run

VIEW = {"width": 1280, "height": 800}


@pytest.fixture
def report(tmp_path):
    sc = make_sc_run(tmp_path / "sc")
    twin = tmp_path / "sc_twin"  # the same run twice: identical curves
    shutil.copytree(sc, twin)
    runs = [sc, twin, make_tree_run(tmp_path / "tree"),
            make_scaling_run(tmp_path / "scaling", task="gsm8k", flops=1.234e6),
            # two runs whose FLOPs (8 values in all, 1.23e6 to 1.24e7) lie close together: their
            # labels overlapped when every value was a tick 36 px apart
            make_scaling_run(tmp_path / "close_a", task="math500", flops=1.234e6, top=8),
            make_scaling_run(tmp_path / "close_b", task="math500", flops=1.55e6, top=8)]
    return write_report(runs, tmp_path / "report.html")


@pytest.fixture
def view(page, report):
    page.page.set_viewport_size(VIEW)
    return page.open(report)


def _box(locator) -> dict:
    box = locator.bounding_box()
    assert box is not None, "not laid out"
    return box


def _overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


def _not_blank(png: Path) -> None:
    image = pytest.importorskip("PIL.Image").open(png).convert("L")
    low, high = image.getextrema()
    assert high - low > 100, f"{png} is blank"


def test_the_first_screen_shows_the_results_and_run_details_are_collapsed_below(
        page, view, tmp_path):
    shot = tmp_path / "first-screen.png"
    view.screenshot(path=str(shot))
    _not_blank(shot)
    table = view.locator('[data-testid="results-table"]').first
    head, first_row = _box(table.locator("thead")), _box(table.locator("tbody tr").first)
    assert first_row["y"] + first_row["height"] <= VIEW["height"]  # on the first screen
    assert head["y"] < VIEW["height"] / 2
    runs = view.locator("details.run")
    assert runs.count() == 6
    assert all(runs.nth(i).get_attribute("open") is None for i in range(6))  # collapsed
    assert _box(view.locator("#runs"))["y"] > _box(view.locator("#items"))["y"]
    assert not view.locator("details.run dl.summary").first.is_visible()
    runs.first.locator("summary").click()
    assert view.locator("details.run dl.summary").first.is_visible()
    assert page.errors == []


def test_one_chart_per_task_and_quantity_with_each_run_in_its_tasks_charts(page, view, tmp_path):
    tasks = view.locator(".task")
    assert [tasks.nth(i).get_attribute("data-task") for i in range(tasks.count())] == \
        ["testbed", "gsm8k", "math500"]
    for i in range(3):
        charts = tasks.nth(i).locator(".chart")
        assert [charts.nth(j).get_attribute("data-axis") for j in range(charts.count())] == \
            ["n", "tokens", "flops", "seconds"]
    testbed, gsm8k = tasks.nth(0), tasks.nth(1)
    assert {g.get_attribute("data-run") for g in testbed.locator(
        '.chart[data-axis="n"] g.series').all()} == {"run0", "run1", "run2"}
    assert {g.get_attribute("data-run") for g in gsm8k.locator("g.series").all()} == {"run3"}
    assert {g.get_attribute("data-run") for g in tasks.nth(2).locator(
        '.chart[data-axis="flops"] g.series').all()} == {"run4", "run5"}
    gsm8k.screenshot(path=str(tmp_path / "gsm8k.png"))
    _not_blank(tmp_path / "gsm8k.png")
    assert page.errors == []


def test_identical_runs_stay_visible_apart(page, view, tmp_path):
    chart = view.locator('.task[data-task="testbed"] .chart[data-axis="n"]')
    chart.screenshot(path=str(tmp_path / "twins.png"))
    one = chart.locator('g.series[data-run="run0"]')
    two = chart.locator('g.series[data-run="run1"]')
    assert one.locator("path.curve").get_attribute("d") != \
        two.locator("path.curve").get_attribute("d")
    a, b = _box(one.locator(".marker").first), _box(two.locator(".marker").first)
    assert abs((a["x"] + a["width"] / 2) - (b["x"] + b["width"] / 2)) >= 2  # set apart
    assert one.locator(".marker").first.evaluate("e => e.tagName") != \
        two.locator(".marker").first.evaluate("e => e.tagName")  # circle vs square
    assert one.locator("path.curve").get_attribute("stroke-dasharray") != \
        two.locator("path.curve").get_attribute("stroke-dasharray")
    legend = chart.locator('[data-testid="legend"] li')
    assert [legend.nth(i).text_content() for i in range(2)] == \
        ["sc · self_consistency", "sc_twin · self_consistency"]
    assert page.errors == []


def test_no_two_axis_tick_labels_overlap(page, view, tmp_path):
    flops = view.locator('.task[data-task="gsm8k"] .chart[data-axis="flops"]')
    flops.screenshot(path=str(tmp_path / "flops-axis.png"))
    labels = flops.locator("text.xtick:visible")
    assert labels.count() >= 3  # 1.234e6 to 5.05e9 FLOPs: a tick per decade at least
    assert all("e" in labels.nth(i).text_content() for i in range(labels.count()))
    close = view.locator('.task[data-task="math500"] .chart[data-axis="flops"]')
    close.screenshot(path=str(tmp_path / "close-flops.png"))
    assert close.locator("text.xtick:visible").count() >= 2
    charts = view.locator(".chart svg[role=img]")
    assert charts.count() == 12
    for i in range(charts.count()):
        boxes = [_box(t) for t in charts.nth(i).locator("text.xtick:visible").all()]
        boxes += [_box(t) for t in charts.nth(i).locator("text.ytick").all()]
        for j, a in enumerate(boxes):
            assert not any(_overlap(a, b) for b in boxes[j + 1:]), (i, j)
    assert page.errors == []


def test_the_candidates_text_column_is_wide(page, view, tmp_path):
    view.locator('.run-items[data-run="run0"] tr.item-row[data-item="a"]').click()
    table = view.locator('.run-items[data-run="run0"] [data-testid="candidates"]')
    table.screenshot(path=str(tmp_path / "candidates.png"))
    _not_blank(tmp_path / "candidates.png")
    text = _box(table.locator("tbody tr").first.locator("td.text"))
    assert text["width"] >= 0.45 * _box(table)["width"]
    assert text["width"] >= 400
    assert page.errors == []


def test_the_results_table_has_latency_and_throughput_beside_accuracy_and_compute(page, view):
    table = view.locator('.task[data-task="testbed"] [data-testid="results-table"]')
    head = [h.text_content() for h in table.locator("th").all()]
    assert head == ["run", "strategy", "N", "accuracy", "items", "tokens / item",
                    "FLOPs / item", "latency p50 (s)", "latency p90 (s)", "items / s"]
    row = table.locator('tr[data-run="run0"][data-n="4"] td')
    cells = [row.nth(i).text_content() for i in range(row.count())]
    # items a and b: 2 s and 6 s, one after the other -> p50 4, p90 5.6, throughput 2 / 8 s
    assert cells[2:] == ["4", "0.500 ± 0.500", "2", "60", "—", "4", "5.6", "0.25"]
    tree = table.locator('tr[data-run="run2"][data-n="4"] td')
    assert [tree.nth(i).text_content() for i in range(7, 10)] == ["1.5", "1.5", "0.667"]
    seconds = view.locator('.task[data-task="testbed"] .chart[data-axis="seconds"]')
    assert seconds.locator("g.series").count() == 3  # both sc runs and the tree run
    assert page.errors == []
