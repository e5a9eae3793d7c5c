"""``metagen demo`` end to end on the testbed's trained models (a few problems)."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main


@pytest.fixture(scope="module")
def testbed():
    from metagen.testbed import model_path
    for name in ("policy", "orm"):
        if not (model_path(name) / "config.json").exists():
            pytest.skip(f"testbed model {name} not trained yet")


def test_demo_on_testbed_models_small(testbed, tmp_path):
    rows_path = tmp_path / "rows.json"
    assert main(["demo", "--problems", "4", "--ns", "1,2,4", "--max-tokens", "120", "--out",
                 str(tmp_path / "d"), "--json", str(rows_path)]) == 0
    rows = {(r["strategy"], r["n"]): r for r in json.loads(rows_path.read_text())["results"]}
    assert len(rows) == 1 + 4 * 3
    for n in (1, 2, 4):
        # MBR with the answer-match utility is majority voting with the same tie-breaking
        assert rows[("mbr", n)]["accuracy"] == rows[("self_consistency", n)]["accuracy"]
        # the same samples; best-of-N also pays the ORM's pass over them
        assert rows[("best_of_n", n)]["generated_tokens"] == \
            rows[("self_consistency", n)]["generated_tokens"]
        assert rows[("best_of_n", n)]["flops"] > rows[("self_consistency", n)]["flops"] > 0
    assert rows[("self_consistency", 4)]["generated_tokens"] == pytest.approx(
        4 * rows[("self_consistency", 1)]["generated_tokens"])
    report = json.loads((tmp_path / "d" / "parallel" / "results.json").read_text())
    assert report["provenance"]["backends"] == ["LocalGenerator"]
    assert report["accounting"]["done"] == 4 and report["status"] == "complete"
