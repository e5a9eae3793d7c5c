"""`metagen bench engine --quick` runs end to end on the smallest settings (no timing asserted):
JSON written, every workload has rows for both peers, and all greedy-token checks pass."""

from __future__ import annotations

import json

from click.testing import CliRunner

from metagen.cli.bench import bench


def test_bench_engine_quick_writes_json(tmp_path) -> None:
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(bench, ["engine", "--quick", "--workloads", "ACDEM", "--json", str(out),
                                     "--cache-dir", str(tmp_path / "models")])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["meta"]["quick"] is True
    assert data["roofline"]["bandwidth_gb_s"] > 0 and data["roofline"]["matmul_gflop_s"] > 0
    assert {r["workload"] for r in data["rows"]} == {"A", "C", "D", "E"}
    assert {r["peer"] for r in data["rows"] if r["workload"] == "A"} == {"transformers", "metagen"}
    assert all(ok is not False for ok in data["checks"].values()), data["checks"]
    assert data["checks"]["A greedy tokens equal across peers"] is True
    for row in data["rows"]:
        assert len(row["times"]) >= 1 and row["time"]["min"] <= row["time"]["median"]
    e = [r for r in data["rows"] if r["workload"] == "E"]
    assert e[0]["prefilled"] <= e[1]["prefilled"]  # the prefix cache never adds prefill work
    assert "llama.cpp" in data["skipped_peers"]
    mem = data["memory"]  # the engine's peak memory in a fresh process, parts that add up
    assert mem["peak_rss"] == mem["base_rss"] + mem["weights"] + mem["kv_cache"] + mem["overhead"]
    assert mem["kv_cache"] <= 256 << 10 and mem["stress_tokens"] > mem["kv_budget_tokens"]


def test_bench_rejects_unknown_workload() -> None:
    res = CliRunner().invoke(bench, ["engine", "--workloads", "AZ"])
    assert res.exit_code != 0 and "unknown workload" in res.output
