"""``metagen eval --config`` end to end on the testbed policy: a study of two tasks (testbed,
gsm8k) x two strategy sets, each with its own N list, runs into four run folders, each with the
run key of its ``metagen eval`` command; SIGKILLed once its first run folder is complete and
rerun, it ends with the results of an uninterrupted study, nothing lost or stored twice; and
``metagen report`` takes the study file or its output root."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from metagen.cli import main
from metagen.eval import get_task
from metagen.eval.runkey import run_key
from metagen.eval.study import Study, load_study
from metagen.testbed import model_path
from tests.conftest import SHARED

ROOT = Path(__file__).resolve().parents[2]
GSM8K = SHARED / "data" / "gsm8k_test.jsonl"
TABLES = ("items", "samples", "scores", "results")


def _study_file(folder: Path) -> Path:
    if not GSM8K.is_file():
        pytest.skip(f"{GSM8K} not found (../shared beside the project root)")
    path = folder / "study.yaml"
    path.write_text(yaml.safe_dump({
        "out": "base",
        "tasks": [{"name": "testbed", "limit": 3},
                  {"name": "gsm8k", "data": str(GSM8K), "limit": 2}],
        "models": [{"path": str(model_path("policy"))}],
        "runs": [{"strategies": ["self_consistency",
                                 {"name": "weighted_vote", "args": {"aggregate": "mean"}}],
                  "n": [1, 2]},
                 {"strategies": [{"name": "first_finish", "args": {"max_depth": 4}}],
                  "n": [1, 3]}],
        "seeds": [3], "sampling": {"max_tokens": 48}, "concurrency": 1}))
    return path


def _results(folder: Path) -> dict:
    report = json.loads((folder / "results.json").read_text())
    report.pop("times")
    return report


def _complete(folder: Path) -> bool:
    try:
        return json.loads((folder / "results.json").read_text())["status"] == "complete"
    except (FileNotFoundError, ValueError):
        return False


def _counts(folder: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{folder / 'run.sqlite'}?mode=ro", uri=True)
    try:
        return {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in TABLES}
    finally:
        db.close()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> Study:
    """The study run once, uninterrupted, into the file's own ``out``."""
    path = _study_file(tmp_path_factory.mktemp("study"))
    assert main(["eval", "--config", str(path)]) == 0
    return load_study(path)


def test_each_run_folder_is_complete_with_its_eval_commands_run_key(baseline):
    assert [r.name for r in baseline.runs] == [
        "testbed/policy/self_consistency+weighted_vote/seed-3",
        "testbed/policy/first_finish/seed-3",
        "gsm8k/policy/self_consistency+weighted_vote/seed-3",
        "gsm8k/policy/first_finish/seed-3"]
    for run in baseline.runs:
        report = json.loads((run.folder / "results.json").read_text())
        assert report["status"] == "complete", run.name
        assert report["run_key"] == run_key(run.config.key_fields(get_task(run.config.task)))
        assert report["accounting"]["done"] == run.config.limit
        assert {(row["strategy"], row["n"]) for row in report["results"]
                if row["metric"] == "accuracy"} == {
            (s, n) for s in run.config.strategies for n in run.config.ns}


def test_a_study_killed_after_its_first_run_resumes_to_the_uninterrupted_results(baseline,
                                                                               tmp_path):
    out = tmp_path / "killed"
    folders = [out / run.name for run in baseline.runs]
    proc = subprocess.Popen([sys.executable, "-m", "metagen", "eval", "--config",
                             str(baseline.path), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 240
    while proc.poll() is None and not _complete(folders[0]) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the study ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _complete(folders[0]) and not all(_complete(f) for f in folders)
    assert main(["eval", "--config", str(baseline.path), "--out", str(out)]) == 0
    for run, folder in zip(baseline.runs, folders):
        assert _results(folder) == _results(run.folder), run.name
        assert _counts(folder) == _counts(run.folder), run.name  # nothing lost or stored twice


def test_the_report_takes_the_study_file_or_its_output_root(baseline, tmp_path, capsys):
    from tests.report.test_html import _data

    page = tmp_path / "study.html"
    assert main(["report", str(baseline.path), "--out", str(page)]) == 0
    assert "4 runs" in capsys.readouterr().out
    by_file = json.loads(_data(page.read_text()))["runs"]
    assert [r["name"] for r in by_file] == [run.name for run in baseline.runs]  # file order
    assert all(r["summary"][0] == ["status", "complete"] and r["curves"] for r in by_file)
    again = tmp_path / "root.html"
    assert main(["report", str(baseline.out), "--out", str(again)]) == 0
    by_root = json.loads(_data(again.read_text()))["runs"]  # the same runs, by path
    assert [r["name"] for r in by_root] == sorted(run.name for run in baseline.runs)
    strip = lambda r: {k: v for k, v in r.items() if k != "id"}  # noqa: E731 - the position
    assert sorted(map(json.dumps, map(strip, by_root))) == sorted(
        map(json.dumps, map(strip, by_file)))


def test_the_report_of_a_study_not_run_yet_is_one_line_naming_it(tmp_path, capsys):
    path = _study_file(tmp_path)
    assert main(["report", str(path), "--out", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err.strip()
    assert "4 of 4 runs" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r.html").exists()
