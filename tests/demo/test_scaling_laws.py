"""``metagen demo --scaling-laws``: the preset's run configurations (one pair of runs per size,
identical but for the policy), its typed errors before any run, and one real tiny run on the
testbed family's models whose folders feed the frontier hook, labelled by model name."""

from __future__ import annotations

import dataclasses
import json

import pytest

import metagen.cli.demo_scaling as demo_scaling
import metagen.eval.demo as preset
import metagen.eval.scaling_laws as scaling
from metagen.cli import main
from metagen.errors import InvalidParameterError
from metagen.eval.table import curve_rows
from metagen.testbed.modeling import FAMILY, model_path


def _present(name: str) -> bool:
    return (model_path(name) / "config.json").is_file()  # type: ignore[arg-type]


def test_one_pair_of_runs_per_size_identical_but_for_the_policy() -> None:
    settings = scaling.scaling_settings()
    models = {name: {"path": str(model_path(name)), "backend": "local"}  # type: ignore[arg-type]
              for name in FAMILY}
    configs = scaling.scaling_configs(settings, models)
    assert list(configs) == ["draft", "policy-s", "policy"]
    orm = str(model_path("orm"))
    for name, runs in configs.items():
        assert list(runs) == [preset.PARALLEL_RUN, preset.SEARCH_RUN]
        parallel, search = runs[preset.PARALLEL_RUN], runs[preset.SEARCH_RUN]
        assert parallel.strategy == "greedy,best_of_n,self_consistency,weighted_vote"
        assert parallel.ns == (1, 2, 4, 8, 16) and parallel.reward == orm
        assert search.strategy == "best_of_n_prm,step_beam_search" and search.ns == (4, 16)
        assert search.prm == f"likelihood+{orm}"  # the ORM's step confidence, every size
        assert parallel.limit == search.limit == 640 and parallel.seed == search.seed == 0
        assert dict(parallel.model) == models[name]
    for run in (preset.PARALLEL_RUN, preset.SEARCH_RUN):
        alike = [dataclasses.replace(runs[run], model={}) for runs in configs.values()]
        assert alike == alike[:1] * 3  # same items, seed, sampling, reward and PRM across sizes
    assert scaling.scaling_folder("o", "draft").as_posix() == "o/scaling_laws/draft"


def test_settings_errors_are_typed_and_name_the_parameter() -> None:
    for kwargs, named in (({"step_search": ()}, "step_search"), ({"problems": 0}, "problems"),
                          ({"step_search": ("beam",)}, "step_search")):
        with pytest.raises(InvalidParameterError) as bad:
            scaling.scaling_settings(**kwargs)  # type: ignore[arg-type]
        assert bad.value.param == named
    with pytest.raises(InvalidParameterError) as bad:
        preset.DemoSettings(parallel=("greedy", "beam"))
    assert bad.value.param == "parallel"


@pytest.mark.parametrize("argv, named", [
    (("--confidence",), "confidence"), (("--ns", "1,x"), "ns"), (("--problems", "0"), "problems"),
    (("--base-url", "http://127.0.0.1:9/v1", "--model", "m"), "base_url"),
    (("--step-ns", "2,y"), "step_ns")])
def test_bad_flags_are_one_line_errors_before_any_run(tmp_path, capsys, argv, named) -> None:
    assert main(["demo", "--scaling-laws", "--out", str(tmp_path / "d"), *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "d").exists()


@pytest.mark.skipif(_present("policy-s"), reason="policy-s is present: nothing is missing")
def test_a_missing_member_is_an_error_naming_it_and_its_train_command(tmp_path, capsys) -> None:
    assert main(["demo", "--scaling-laws", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    assert "policy-s" in err and "metagen testbed train --only policy-s" in err
    assert not (tmp_path / "d").exists()


def test_tiny_real_run_feeds_every_folder_to_the_frontier_hook_by_model(tmp_path, monkeypatch,
                                                                        capsys) -> None:
    names = [name for name in FAMILY if _present(name)]
    if len(names) < 2:
        pytest.skip("needs the testbed draft and policy")
    settings = scaling.scaling_settings(problems=2, ns=(1, 2), step_ns=(2,), max_tokens=80)
    calls: list[tuple[dict, object]] = []

    def recording_frontier(run_folders, *, plot_path):
        calls.append((dict(run_folders), plot_path))
        return {"labels": list(run_folders)}, "frontier text"

    loads: list[str] = []

    def load(name: str):
        loads.append(name)
        return preset.load_testbed_policy("local", name)

    def run():
        return scaling.run_scaling(
            settings, tmp_path, models=scaling.family_models("local", names),
            load_generator=load, loaders=preset.testbed_loaders(settings),
            plot_path=tmp_path / "f.png", frontier=recording_frontier)

    done = run()
    assert done.code == 0 and loads == names and done.frontier == (
        {"labels": names}, "frontier text")
    [(folders, plot)] = calls
    assert plot == tmp_path / "f.png"
    assert folders == {name: [tmp_path / "scaling_laws" / name / "parallel",
                              tmp_path / "scaling_laws" / name / "step_search"]
                       for name in names}
    for name in names:
        parallel, search = (json.loads((f / "results.json").read_text())
                            for f in folders[name])
        assert parallel["status"] == search["status"] == "complete"
        assert {(r["strategy"], r["n"]) for r in curve_rows([parallel])} == {("greedy", 1)} | {
            (s, n) for s in scaling.SCALING_PARALLEL[1:] for n in (1, 2)}
        assert {(r["strategy"], r["n"]) for r in curve_rows([search])} == {
            ("best_of_n_prm", 2), ("step_beam_search", 2)}
        assert parallel["provenance"]["model"]["path"] == str(model_path(name))
        assert scaling.run_seconds(parallel) >= 0
    again = run()  # resumes: every problem is done, no policy is loaded
    assert loads == names and again.reports.keys() == done.reports.keys()
    assert [r["results"] for runs in again.reports.values() for r, _ in runs.values()] == [
        r["results"] for runs in done.reports.values() for r, _ in runs.values()]
    # the real frontier over the same folders: every size's candidates, a PNG plot
    report, text = demo_scaling.scaling_frontier(folders, plot_path=tmp_path / "real.png")
    assert {c.split("/")[0] for c in report["candidates"]} == set(names)
    assert (tmp_path / "real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "held-out" in text
    if names != list(FAMILY):
        return  # the command runs the whole family; below, it resumes the runs above
    monkeypatch.setattr(demo_scaling, "scaling_frontier", recording_frontier)
    capsys.readouterr()
    assert main(["demo", "--scaling-laws", "--out", str(tmp_path), "--problems", "2", "--ns",
                 "1,2", "--step-ns", "2", "--max-tokens", "80", "--json",
                 str(tmp_path / "rows.json")]) == 0
    assert loads == names and len(calls) == 3 and "frontier text" in capsys.readouterr().out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert sorted(rows["models"]) == sorted(names) and rows["frontier"] == {"labels": names}
