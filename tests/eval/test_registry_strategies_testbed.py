"""``metagen eval testbed`` end to end on the testbed's trained models with strategies the
registry gave eval (a refinement, tree of thoughts on the trained PRM): a tiny run completes,
with measured tokens per N and a resumable folder."""

from __future__ import annotations

import json

import pytest

from metagen.cli import main


@pytest.fixture(scope="module")
def models():
    from metagen.testbed import model_path
    for name in ("policy", "prm"):
        if not (model_path(name) / "config.json").exists():
            pytest.skip(f"testbed model {name} not trained yet")
    return {name: str(model_path(name)) for name in ("policy", "prm")}


def test_self_refine_and_tree_of_thoughts_on_testbed_models(models, tmp_path):
    out = tmp_path / "run"
    args = ["eval", "testbed", "--model", models["policy"], "--prm", models["prm"],
            "--strategy", "self_refine,tree_of_thoughts", "--n", "1,2", "--limit", "2",
            "--max-tokens", "48", "--out", str(out)]
    assert main(args) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["status"] == "complete" and report["accounting"]["done"] == 2
    got = {(r["strategy"], r["n"], r["metric"]): r for r in report["results"]}
    for strategy in ("self_refine", "tree_of_thoughts"):
        for n in (1, 2):
            assert 0.0 <= got[(strategy, n, "accuracy")]["mean"] <= 1.0
            assert got[(strategy, n, "generated_tokens")]["mean"] > 0  # measured, its own run
    assert report["generated_tokens"] > 0
    assert main(args) == 0  # a rerun resumes: every item is done, nothing is redone
    again = json.loads((out / "results.json").read_text())
    assert again["results"] == report["results"] and again["times"]["resumed_items"] == 2
