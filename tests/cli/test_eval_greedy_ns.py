"""``metagen eval --strategy greedy``: greedy is one temperature-0 sample per item (N = 1), so a
``--n`` asking for more is refused naming ``--n`` before any model load, instead of silently
running N = 1 only; without ``--n`` it runs at N = 1."""

from __future__ import annotations

import json
from pathlib import Path

from metagen.cli import main

POLICY = Path(__file__).resolve().parents[2] / "metagen" / "testbed" / "models" / "policy"


def test_greedy_alone_with_several_ns_is_refused_naming_n(tmp_path, capsys) -> None:
    for ns in ("1,4", "4"):
        args = ["eval", "testbed", "--model", str(tmp_path / "no-such-model"), "--strategy",
                "greedy", "--n", ns, "--out", str(tmp_path / "run")]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "--n 1" in err and "greedy" in err, err
        assert len(err.splitlines()) == 1 and not (tmp_path / "run").exists()


def test_greedy_alone_without_n_runs_at_n_1(tmp_path, capsys) -> None:
    out = tmp_path / "run"
    args = ["eval", "testbed", "--model", str(POLICY), "--strategy", "greedy", "--limit", "2",
            "--max-tokens", "32", "--out", str(out)]
    assert main(args) == 0, capsys.readouterr().err
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["ns"] == [1]
