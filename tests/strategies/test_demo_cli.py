"""`metagen demo` command: flags, outputs and one-line errors (scripted generator and ORM)."""

from __future__ import annotations

import json

import metagen.demo
from metagen.cli import main
from metagen.generators.mock import MockGenerator
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import TableReward
from tests.strategies.test_demo_pipeline import PROBLEMS, _script


def test_scripted_demo_command_writes_table_plot_and_json(tmp_path, monkeypatch, capsys):
    real = metagen.demo.run_demo

    def scripted(config, on_stage=None):
        assert config.ns == (1, 2, 4, 8) and config.problems == 2
        return real(config, generator=MockGenerator(_script), orm=TableReward({}),
                    problems=PROBLEMS, format_prompt=lambda p: f"Q: {p.question}",
                    grade=lambda t, a: same(last_int(t) or "-1", a), extract=last_int,
                    match=same, on_stage=on_stage)

    monkeypatch.setattr(metagen.demo, "run_demo", scripted)
    out_json, out_png = tmp_path / "r.json", tmp_path / "p.png"
    code = main(["demo", "--problems", "2", "--ns", "1,2,4,8", "--max-tokens", "4",
                 "--json", str(out_json), "--plot", str(out_png)])
    assert code == 0
    text = capsys.readouterr().out
    assert "self-consistency" in text and "best-of-N (ORM)" in text
    data = json.loads(out_json.read_text())
    assert data["problems"] == 2 and len(data["results"]) == 1 + 4 * 4
    assert out_png.stat().st_size > 1000


def test_demo_bad_flags_are_one_line_errors(capsys):
    assert main(["demo", "--ns", "4,2"]) == 2
    err = capsys.readouterr().err
    assert "ns" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert main(["demo", "--temperature", "0"]) == 2
    assert "temperature" in capsys.readouterr().err
