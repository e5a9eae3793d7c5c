"""``metagen demo`` as a preset of the runner (scripted policy, ORM and PRM on testbed items):
its table is the runner's curve of the preset's configs, its folders are ordinary resumable
run folders, ``--full`` / ``--confidence`` add their strategies, bad flags are one line."""

from __future__ import annotations

import json

import pytest

import metagen.eval.demo as preset
from metagen.cli import main
from metagen.eval import get_task, run_eval
from metagen.eval.runner import CONFIDENCE, PRM, REWARD
from metagen.eval.table import curve_rows
from metagen.generators.mock import MockGenerator
from tests.eval.test_direct_scripted import prm, step
from tests.eval.test_runner_scripted import reward, text


def confidence(prompt: str, completion: str) -> float:
    return (len(completion) % 5) / 5


@pytest.fixture
def scripted(monkeypatch):
    """The preset's testbed models replaced by scripts; ``calls`` counts policy loads."""
    calls: list[str] = []

    def policy(backend: str) -> MockGenerator:
        calls.append(backend)
        return MockGenerator(text)

    monkeypatch.setattr(preset, "load_testbed_policy", policy)
    monkeypatch.setattr(preset, "testbed_loaders", lambda settings: {
        REWARD: lambda: reward, PRM: lambda: prm, CONFIDENCE: lambda: confidence})
    return calls


ARGS = ["demo", "--problems", "6", "--ns", "1,2,4", "--max-tokens", "8"]


def _demo(tmp_path, *extra: str) -> tuple[int, list[dict]]:
    out = tmp_path / "demo"
    code = main([*ARGS, "--out", str(out), "--json", str(tmp_path / "rows.json"), *extra])
    return code, json.loads((tmp_path / "rows.json").read_text())["results"]


def test_scripted_demo_table_is_the_runners_curve_of_its_preset(tmp_path, scripted, capsys):
    code, rows = _demo(tmp_path)
    assert code == 0 and scripted == ["local"]
    text_out = capsys.readouterr().out
    for label in ("greedy", "best-of-N (ORM)", "self-consistency", "weighted vote (ORM)", "MBR"):
        assert label in text_out
    assert {(r["strategy"], r["n"]) for r in rows} == {("greedy", 1)} | {
        (s, n) for s in preset.PARALLEL[1:] for n in (1, 2, 4)}
    config = preset.demo_configs(preset.DemoSettings(problems=6, ns=(1, 2, 4), max_tokens=8),
                                 {"path": str(preset.testbed_model("policy")),
                                  "backend": "local"})[preset.PARALLEL_RUN]
    alone, _ = run_eval(config, get_task("testbed"), tmp_path / "alone",
                        load_generator=lambda: MockGenerator(text), load_reward=lambda: reward)
    want = [{k: r[k] for k in ("strategy", "n", "accuracy", "generated_tokens")}
            for r in curve_rows([alone])]
    assert [{k: r[k] for k in want[0]} for r in rows] == want
    report = json.loads((tmp_path / "demo" / "parallel" / "results.json").read_text())
    assert report["status"] == "complete" and report["provenance"]["backends"] == [
        "MockGenerator"]
    assert report["config"]["strategy"] == ",".join(preset.PARALLEL)
    assert (tmp_path / "demo" / "metagen_demo.png").stat().st_size > 1000


def test_scripted_rerun_resumes_and_loads_no_model(tmp_path, scripted):
    _, first = _demo(tmp_path)
    _, again = _demo(tmp_path)
    assert scripted == ["local"] and again == first


def test_scripted_changed_setting_is_one_line_naming_the_run_key(tmp_path, scripted, capsys):
    _demo(tmp_path)
    capsys.readouterr()
    assert main([*ARGS, "--out", str(tmp_path / "demo"), "--seed", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "run_key" in err and "--force-resume" in err and len(err.splitlines()) == 1


def test_scripted_full_runs_every_step_search_in_its_own_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(preset, "load_testbed_policy", lambda backend: MockGenerator(step))
    monkeypatch.setattr(preset, "testbed_loaders", lambda s: {REWARD: lambda: reward,
                                                               PRM: lambda: prm})
    code = main(["demo", "--problems", "2", "--ns", "1,2", "--max-tokens", "8", "--full",
                 "--step-ns", "2", "--out", str(tmp_path / "d"), "--json",
                 str(tmp_path / "rows.json")])
    rows = json.loads((tmp_path / "rows.json").read_text())["results"]
    assert code == 0
    assert {r["strategy"] for r in rows if r["n"] == 2} == set(preset.PARALLEL[1:]) | set(
        preset.full_step_searches()) | {preset.PRM_BASELINE}
    assert all(r["n"] == 2 for r in rows if r["strategy"] in preset.full_step_searches())
    search = json.loads((tmp_path / "d" / "step_search" / "results.json").read_text())
    assert search["config"]["ns"] == [2] and search["status"] == "complete"


def test_scripted_confidence_adds_its_two_strategies(tmp_path, scripted):
    code, rows = _demo(tmp_path, "--confidence")
    assert code == 0
    assert {r["strategy"] for r in rows} == set(preset.PARALLEL) | set(
        preset.CONFIDENCE_STRATEGIES)


@pytest.mark.parametrize("argv, named", [
    (("--ns", "4,2"), "n"), (("--temperature", "0"), "temperature"),
    (("--step-search", "beam"), "step_search"), (("--problems", "0"), "problems")])
def test_demo_bad_flags_are_one_line_errors(tmp_path, capsys, argv, named):
    assert main(["demo", "--out", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--plot", "--json"])
def test_an_unwritable_plot_or_json_path_is_one_line_before_any_load(tmp_path, capsys, flag,
                                                                      monkeypatch):
    def never(*args):
        raise AssertionError("no model may be loaded here")

    monkeypatch.setattr(preset, "load_testbed_policy", never)
    (tmp_path / "file").write_text("x")
    for target in (tmp_path / "file" / "x.png", tmp_path):
        assert main(["demo", "--out", str(tmp_path / "d"), flag, str(target)]) == 2
        err = capsys.readouterr().err.strip()
        assert flag.strip("-") in err and len(err.splitlines()) == 1
    assert not (tmp_path / "d" / "parallel").exists()  # no run was started
