"""The reviser's wiring: ``metagen testbed train --only revise`` knows it (and refuses the
shipped folder before any work, as for every model), and ``metagen eval testbed`` runs the
revision chains next to parallel sampling on the shipped reviser into an ordinary run folder,
with each N's measured tokens and FLOPs."""

from __future__ import annotations

import json

from metagen.cli import main
from metagen.testbed import model_path
from metagen.testbed.modeling import MODELS_DIR, NAMES, PIPELINE


def test_revise_is_trained_only_by_name(capsys) -> None:
    assert "revise" in NAMES and "revise" not in PIPELINE
    before = {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()}
    assert main(["testbed", "train", "--only", "revise", "--out", str(MODELS_DIR)]) == 2
    assert "--overwrite-shipped" in capsys.readouterr().err
    assert {f: f.stat().st_mtime_ns for f in MODELS_DIR.rglob("*") if f.is_file()} == before


def test_eval_runs_chains_and_parallel_sampling_on_the_reviser(tmp_path) -> None:
    out = tmp_path / "run"
    args = ["eval", "testbed", "--model", str(model_path("revise")), "--reward",
            str(model_path("orm")), "--strategy", "best_of_n,revision_chain,revision_vote",
            "--n", "1,2", "--limit", "2", "--max-tokens", "96", "--out", str(out)]
    assert main(args) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["status"] == "complete"
    got = {(r["strategy"], r["n"], r["metric"]): r for r in report["results"]}
    for strategy in ("best_of_n", "revision_chain", "revision_vote"):
        for n in (1, 2):
            assert 0.0 <= got[(strategy, n, "accuracy")]["mean"] <= 1.0
    for strategy in ("revision_chain", "revision_vote"):  # measured: two attempts cost more
        assert got[(strategy, 2, "generated_tokens")]["mean"] > \
            got[(strategy, 1, "generated_tokens")]["mean"] > 0
        assert got[(strategy, 2, "flops")]["mean"] > got[(strategy, 1, "flops")]["mean"] > 0
    # the ORM read: best of a chain costs its verifier pass on top of the same chain
    assert got[("revision_chain", 2, "flops")]["mean"] > got[("revision_vote", 2, "flops")]["mean"]
