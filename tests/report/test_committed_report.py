"""The committed example report (``docs/runs/report.html``, written by ``metagen report
docs/runs/*/``) in a real headless Chromium: it loads without console or page errors, it shows
every run folder of ``docs/runs/``, each run's strategies are curves with one point per N its
``results.json`` records, and the step-search run's items show their search tree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.report.runs import read_json

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "docs" / "runs"
REPORT = RUNS / "report.html"
TREE_STRATEGIES = {"step_beam_search", "dvts", "best_first", "mcts", "rebase"}


def _folders() -> list[Path]:
    return sorted(p.parent for p in RUNS.glob("*/results.json"))


def _run_ids(p) -> dict[str, str]:
    """Run folder name -> the page's run id."""
    runs = p.locator(".run[data-run]")
    return {runs.nth(i).locator("h3").text_content(): runs.nth(i).get_attribute("data-run")
            for i in range(runs.count())}


@pytest.fixture
def opened(page):
    if not REPORT.is_file():
        pytest.fail(f"{REPORT} is missing: metagen report docs/runs/*/ --out {REPORT}")
    return page, page.open(REPORT)


def test_the_committed_report_loads_without_errors_and_shows_every_run(opened):
    page, p = opened
    assert p.title() == "metagen report"
    assert sorted(_run_ids(p)) == [f.name for f in _folders()]
    assert len(_folders()) >= 6  # one per task type, the scaling run, the step search
    assert page.errors == []


def test_every_run_strategy_is_a_curve_with_a_point_per_recorded_n(opened):
    page, p = opened
    ids = _run_ids(p)
    chart = p.locator('.chart[data-axis="n"]')
    for folder in _folders():
        rows = read_json(folder / "results.json")["results"]
        for strategy in {r["strategy"] for r in rows}:
            want = len({r["n"] for r in rows if r["strategy"] == strategy})  # cost rows: no curve
            curve = chart.locator(f'g.series[data-run="{ids[folder.name]}"]'
                                  f'[data-strategy="{strategy}"] path.curve')
            d = curve.get_attribute("d")
            assert len(re.findall(r"[ML]", d)) == want, (folder.name, strategy)
            assert "NaN" not in d
    assert page.errors == []


def test_the_step_search_runs_item_shows_its_tree(opened):
    page, p = opened
    ids = _run_ids(p)
    searched = [f for f in _folders() if TREE_STRATEGIES & set(
        read_json(f / "results.json")["config"]["strategy"].split(","))]
    assert searched, "no step-search run in docs/runs"
    for folder in searched:
        box = f'.run-items[data-run="{ids[folder.name]}"]'
        p.locator(f"{box} tr.item-row").first.click()
        detail = p.locator(f'{box} [data-testid="item-detail"]')
        ns = read_json(folder / "results.json")["config"]["ns"]
        search = detail.locator(f'[data-testid="search"][data-n="{max(ns)}"]')
        tree = search.locator("ul.tree")
        assert tree.locator("li.node").count() > 2  # root, its expansions and their steps
        search.locator('[data-testid="expand-all"]').click()
        steps = tree.locator("li.node > .step")
        assert any((steps.nth(i).text_content() or "").strip() for i in range(steps.count()))
    assert page.errors == []
