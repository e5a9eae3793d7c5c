"""``metagen serve``: user errors are one line and exit status 2, before anything is bound."""

from __future__ import annotations

from metagen.cli import main


def test_serve_missing_model_is_one_line(tmp_path, capsys):
    assert main(["serve", str(tmp_path / "nope"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "config.json" in err and err.count("\n") == 1


def test_serve_bad_orm_option_is_one_line(stories_path, capsys):
    assert main(["serve", str(stories_path), "--orm", "no-equals-sign"]) == 2
    err = capsys.readouterr().err
    assert "--orm" in err and "NAME=SPEC" in err and err.count("\n") == 1


def test_serve_bad_prm_option_is_one_line(stories_path, tmp_path, capsys):
    assert main(["serve", str(stories_path), "--prm", "no-equals-sign"]) == 2
    err = capsys.readouterr().err
    assert "--prm" in err and "NAME=SPEC" in err and err.count("\n") == 1
    assert main(["serve", str(stories_path), "--prm", f"prm={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "config.json" in err and err.count("\n") == 1


def test_serve_is_listed():
    from metagen.cli import cli
    assert "serve" in cli.list_commands(None)  # type: ignore[arg-type]
