"""The scorer flags of ``metagen eval`` / ``demo`` / ``serve`` read one spec grammar: a bad spec
is one error line naming the flag (and the query key) before any model loads; the demo's run
configs hold the canonical specs."""

from __future__ import annotations

from pathlib import Path

import pytest

from metagen.cli import main

EVAL = ["eval", "testbed", "--model", "no-such-policy", "--strategy", "best_of_n,dvts",
        "--n", "1,2"]


@pytest.mark.parametrize(("args", "flag", "says"), [
    (["--reward", "http://127.0.0.1:9?model=m"], "reward", "api in front"),
    (["--reward", "pooling+http://127.0.0.1:9?model=m&colour=red"], "reward", "'colour'"),
    (["--reward", "pooling+http://127.0.0.1:9"], "reward", "'model'"),
    (["--prm", "classify+http://127.0.0.1:9?model=m"], "prm", "one value per sequence"),
    (["--prm", "unit-tests"], "prm", "outcome reward only"),
])
def test_eval_bad_specs_are_one_line_naming_the_flag(tmp_path, capsys, args, flag, says):
    assert main([*EVAL, *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"invalid {flag}=" in err and says in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()  # refused before the run folder is made


def test_eval_bare_likelihood_needs_a_local_policy(tmp_path, capsys):
    assert main(["eval", "testbed", "--base-url", "http://127.0.0.1:9/v1", "--model", "p",
                 "--strategy", "best_of_n", "--reward", "likelihood",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "invalid reward=" in err and "likelihood+FOLDER" in err


@pytest.mark.parametrize(("args", "flag"), [
    (["--reward", "grpc+http://h?model=m"], "reward"),
    (["--prm", "pooling+http://h?model=m&format=nope"], "prm"),
])
def test_demo_bad_specs_are_one_line_naming_the_flag(tmp_path, capsys, args, flag):
    assert main(["demo", "--out", str(tmp_path / "d"), *args]) == 2
    err = capsys.readouterr().err
    assert f"invalid {flag}=" in err and len(err.strip().splitlines()) == 1


def test_serve_bad_orm_spec_names_the_flag_and_key(stories_path, capsys):
    assert main(["serve", str(stories_path), "--orm",
                 "rm=json+http://127.0.0.1:9?model=m&nope=1"]) == 2
    err = capsys.readouterr().err
    assert "invalid orm=" in err and "'nope'" in err and len(err.strip().splitlines()) == 1


def test_demo_configs_hold_the_canonical_specs():
    from metagen.eval import demo as preset
    from metagen.testbed import model_path

    for name in ("orm", "prm"):
        if not (model_path(name) / "config.json").is_file():
            pytest.skip(f"testbed model {name} not trained yet")
    orm, prm = (str(Path(model_path(n)).resolve()) for n in ("orm", "prm"))
    policy = {"path": "policy"}
    remote = "pooling+http://127.0.0.1:9?model=rm&positive_label=1"
    default = preset.demo_configs(preset.DemoSettings(step_search=("dvts",)), policy)
    assert default["parallel"].reward == orm
    assert default["step_search"].prm == f"likelihood+{orm}"
    chosen = preset.demo_configs(preset.DemoSettings(step_search=("dvts",), prm="trained",
                                                     reward=remote), policy)
    assert chosen["parallel"].reward == remote and chosen["step_search"].prm == prm
