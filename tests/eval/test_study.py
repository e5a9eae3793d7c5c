"""A study file is checked whole before any model loads, each refusal naming its dotted key;
its runs are the cross product, each in its own deterministically named folder, each exactly a
``metagen eval`` command line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from metagen.cli import main
from metagen.errors import InvalidParameterError
from metagen.eval.study import load_study, parse_study
from metagen.testbed import model_path

POLICY = str(model_path("policy").resolve())


def _gsm8k(folder: Path) -> Path:
    path = folder / "gsm8k_tiny.jsonl"
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i}?",
                                        "answer": f"{i} + {i} = {2 * i}\n#### {2 * i}"}) + "\n"
                            for i in range(1, 4)))
    return path


def _study(folder: Path) -> dict[str, Any]:
    _gsm8k(folder)
    return {"out": "out",
            "tasks": [{"name": "testbed", "limit": 3},
                      {"name": "gsm8k", "data": "gsm8k_tiny.jsonl", "limit": 2}],
            "models": [{"path": POLICY}],
            "runs": [{"strategies": ["self_consistency",
                                     {"name": "weighted_vote", "args": {"aggregate": "mean"}}],
                      "n": [1, 2]},
                     {"strategies": [{"name": "step_beam_search", "args": {"width": 2}}],
                      "n": [1, 4], "prm": "likelihood"}],
            "seeds": [0, 5], "sampling": {"temperature": 0.7, "max_tokens": 32}}


def test_the_runs_are_the_cross_product_in_named_folders_as_eval_command_lines(tmp_path):
    study = parse_study(_study(tmp_path), tmp_path / "study.yaml")
    assert study.out == tmp_path.resolve() / "out"
    assert [r.name for r in study.runs] == [
        f"{task}/policy/{strategies}/seed-{seed}" for task in ("testbed", "gsm8k")
        for strategies in ("self_consistency+weighted_vote", "step_beam_search")
        for seed in (0, 5)]
    assert all(r.folder == study.out / r.name for r in study.runs)
    first, beam = study.runs[0], study.runs[3]
    assert first.key == "tasks[0] x models[0] x runs[0] x seeds[0]"
    assert first.config.ns == (1, 2) and first.config.seed == 0 and first.config.limit == 3
    assert first.config.sampling.temperature == 0.7 and first.config.sampling.max_tokens == 32
    assert first.config.options == {"self_consistency": {},
                                    "weighted_vote": {"aggregate": "mean"}}
    assert beam.config.prm == f"likelihood+{POLICY}" and beam.config.seed == 5
    argv = list(beam.argv)
    assert argv[:5] == ["testbed", "--limit", "3", "--model", POLICY]
    assert argv[argv.index("--strategy-arg") + 1] == "width=2"
    assert argv[argv.index("--out") + 1] == str(beam.folder)
    gsm8k = study.runs[4].config
    assert gsm8k.data == str(tmp_path.resolve() / "gsm8k_tiny.jsonl") and gsm8k.limit == 2


def test_greedy_alone_runs_at_n_1_and_defaults_fill_the_rest(tmp_path):
    data = {"out": str(tmp_path / "o"), "tasks": ["testbed"], "models": [POLICY],
            "runs": [{"strategies": ["greedy"]}, {"strategies": ["self_consistency"]}]}
    greedy, sc = parse_study(data, tmp_path / "s.yaml").runs
    assert greedy.config.ns == (1,) and sc.config.ns == (1, 4, 16)
    assert sc.config.sampling.temperature == 0.8 and sc.config.sampling.max_tokens == 256
    assert sc.name == "testbed/policy/self_consistency/seed-0"


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    """Set dotted ``path`` (``runs[1].n``; ``DEL`` deletes) in ``data``."""
    keys: list[Any] = []
    for part in path.split("."):
        name, _, rest = part.partition("[")
        keys += [name] + [int(i) for i in rest.rstrip("]").split("][") if i] if rest else [name]
    target = data
    for key in keys[:-1]:
        target = target[key]
    if value == "DEL":
        del target[keys[-1]]
    else:
        target[keys[-1]] = value


CASES = [  # (key set, value, the key the error must name)
    ("runs[1].strategies[0].args.width", 0, "runs[1].strategies[0].args.width"),
    ("runs[1].strategies[0].args.widht", 2, "runs[1].strategies[0].args.widht"),
    ("runs[0].strategies[1].args.aggregate", "median", "runs[0].strategies[1].args.aggregate"),
    ("runs[0].strategies[0]", "no_such_strategy", "runs[0].strategies[0]"),
    ("runs[0].strategies[1]", "self_consistency", "runs[0].strategies[1]"),
    ("runs[0].n", [4, 1], "runs[0].n"),
    ("runs[0].n", [1, "4"], "runs[0].n[1]"),
    ("runs[0].label", "..", "runs[0].label"),
    ("runs[0].colour", "red", "runs[0].colour"),
    ("runs[1].prm", "DEL", "prm"),  # step_beam_search needs a PRM
    ("runs[1].prm", "pooling+http://x", "runs[1].prm"),
    ("seeds", [0, -1], "seeds[1]"),
    ("seeds", [3, 3], "seeds"),
    ("sampling.temperature", "hot", "sampling.temperature"),
    ("sampling.top_p", 1.5, "sampling.top_p"),
    ("sampling.max_tokens", 0, "sampling.max_tokens"),
    ("sampling.beams", 2, "sampling.beams"),
    ("tasks[0].name", "nope", "tasks[0].name"),
    ("tasks[0].limit", 0, "tasks[0].limit"),
    ("tasks[1].data", "missing.jsonl", "tasks[1].data"),
    ("tasks[1].label", "testbed", "tasks[1]"),  # the same folder name as tasks[0]
    ("models[0].path", "no/such/folder", "models[0].path"),
    ("models[0].backend", "vllm", "models[0].backend"),
    ("models[0].quantization", "int3", "models[0].quantization"),
    ("models[0].model", "name", "models[0].model"),
    ("concurrency", 0, "concurrency"),
    ("out", "DEL", "out"),
    ("runs", [], "runs"),
    ("tasks", "testbed", "tasks"),
    ("seed", 1, "seed"),
]


@pytest.mark.parametrize(("path", "value", "named"), CASES, ids=lambda v: str(v))
def test_a_bad_value_is_refused_naming_its_dotted_key(tmp_path, path, value, named):
    data = copy.deepcopy(_study(tmp_path))
    _set(data, path, value)
    with pytest.raises(InvalidParameterError) as info:
        parse_study(data, tmp_path / "study.yaml")
    assert info.value.param == named, str(info.value)


def test_a_shared_arg_must_be_given_alike_to_every_strategy_of_the_run_taking_it(tmp_path):
    """self_consistency and weighted_vote both take min_successful: one value reaches both."""
    data = _study(tmp_path)
    data["runs"][0]["strategies"][1]["args"]["min_successful"] = 2
    with pytest.raises(InvalidParameterError) as info:
        parse_study(data, tmp_path / "study.yaml")
    assert info.value.param == "runs[0].strategies[1].args.min_successful"
    assert "self_consistency" in info.value.reason
    data["runs"][0]["strategies"][0] = {"name": "self_consistency",
                                        "args": {"min_successful": 2}}
    run = parse_study(data, tmp_path / "study.yaml").runs[0]
    assert run.config.options["self_consistency"] == {"min_successful": 2}


def test_a_server_model_is_named_by_its_model_and_refuses_bare_likelihood(tmp_path):
    data = _study(tmp_path)
    data["models"] = [{"base_url": "http://127.0.0.1:9/v1", "model": "org/m-7b"}]
    with pytest.raises(InvalidParameterError) as info:
        parse_study(data, tmp_path / "study.yaml")
    assert info.value.param == "runs[1].prm"
    data["runs"][1]["prm"] = f"likelihood+{POLICY}"
    runs = parse_study(data, tmp_path / "study.yaml").runs
    assert runs[0].name == "testbed/org_m-7b/self_consistency+weighted_vote/seed-0"
    assert runs[0].config.model == {"base_url": "http://127.0.0.1:9/v1", "model": "org/m-7b",
                                    "revision": None}
    assert "--base-url" in runs[0].argv and "--backend" not in runs[0].argv


def test_the_study_file_is_yaml_and_a_broken_one_names_config(tmp_path):
    import yaml

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(_study(tmp_path)))
    assert len(load_study(path).runs) == 8
    assert load_study(path, tmp_path / "elsewhere").out == tmp_path.resolve() / "elsewhere"
    path.write_text("tasks: [testbed\n")
    with pytest.raises(InvalidParameterError) as info:
        load_study(path)
    assert info.value.param == "config"


def test_eval_config_refuses_a_per_run_flag_and_names_the_key_in_one_line(tmp_path, capsys,
                                                                          monkeypatch):
    import yaml

    path = tmp_path / "study.yaml"
    data = _study(tmp_path)
    path.write_text(yaml.safe_dump(data))
    for flag, named in ((["--strategy", "self_consistency"], "strategy"), (["--n", "1,2"], "n"),
                        (["testbed"], "task"), (["--strategy-arg", "width=2"], "strategy_arg")):
        assert main(["eval", "--config", str(path), *flag]) == 2
        err = capsys.readouterr().err.strip()
        assert f"invalid {named}=" in err and "study file" in err, err
        assert len(err.splitlines()) == 1
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # the server key comes from the environment
    data["runs"][1]["strategies"][0]["args"]["width"] = 0
    path.write_text(yaml.safe_dump(data))
    assert main(["eval", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: invalid runs[1].strategies[0].args.width=0")
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was written
    assert main(["eval", "testbed", "--model", POLICY, "--out", str(tmp_path / "o")]) == 2
    assert "invalid strategy=None" in capsys.readouterr().err


def test_the_readme_sample_study_is_valid_as_placed_at_the_project_root():
    import yaml

    from tests.conftest import ROOT, SHARED

    if not (SHARED / "data" / "gsm8k_test.jsonl").is_file():
        pytest.skip(f"{SHARED} not found (../shared beside the project root)")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("# study.yaml", 1)[1].split("\n", 1)[1].split("```", 1)[0]
    study = parse_study(yaml.safe_load(block), ROOT / "study.yaml")
    assert len(study.runs) == 2 * 1 * 2 * 2 and study.out == ROOT.resolve() / "runs" / "study"
    assert study.runs[-1].name == "gsm8k/policy/step_beam_search/seed-1"
