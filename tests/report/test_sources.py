"""``metagen report`` over a study's output root: every run folder under it, named by its path
under the root, in path order; a run folder given itself keeps its own name."""

from __future__ import annotations

import json

from metagen.cli import main
from metagen.report.sources import report_runs, run_folders
from tests.report.runs import make_sc_run, make_tree_run
from tests.report.test_html import _data


def test_an_output_root_gives_its_run_folders_named_by_their_path_under_it(tmp_path):
    root = tmp_path / "study"
    tree = make_tree_run(root / "testbed" / "policy" / "step_beam_search" / "seed-0")
    sc = make_sc_run(root / "gsm8k" / "policy" / "self_consistency" / "seed-0")
    (root / "testbed" / "not-a-run").mkdir()
    assert run_folders(root) == [sc, tree]
    assert report_runs([root, sc]) == [
        ("gsm8k/policy/self_consistency/seed-0", sc),
        ("testbed/policy/step_beam_search/seed-0", tree), ("seed-0", sc)]


def test_cli_reports_an_output_root_with_the_runs_path_names(tmp_path, capsys):
    root, out = tmp_path / "study", tmp_path / "r.html"
    make_sc_run(root / "a" / "seed-0")
    make_sc_run(root / "b" / "seed-0")
    assert main(["report", str(root), "--out", str(out)]) == 0
    assert "2 runs" in capsys.readouterr().out
    model = json.loads(_data(out.read_text()))
    assert [r["name"] for r in model["runs"]] == ["a/seed-0", "b/seed-0"]
