"""The engine benchmark (``python -m benchmarks.engine_bench --quick``) runs end to end on the
smallest settings (no timing asserted): JSON written, every workload has rows for both peers, all
greedy-token checks pass, and every workload is run and labelled at each thread count, under
the CPU's ISA. ``metagen bench engine`` prints that command instead of reaching into a checkout."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from benchmarks import engine_bench
from metagen.cli.bench import bench
from metagen.engine.native.cpu import cpu_model, vector_isa


def test_bench_engine_quick_writes_json(tmp_path) -> None:
    out = tmp_path / "bench.json"
    assert engine_bench.main(["--quick", "--workloads", "ACDEM", "--json", str(out),
                              "--cache-dir", str(tmp_path / "models"), "--threads", "1"]) == 0
    data = json.loads(out.read_text())
    assert data["meta"]["quick"] is True and data["meta"]["threads"] == [1]
    assert data["roofline"]["bandwidth_gb_s"] > 0 and data["roofline"]["matmul_gflop_s"] > 0
    assert {r["workload"] for r in data["rows"]} == {"A", "C", "D", "E"}
    assert {r["peer"] for r in data["rows"] if r["workload"] == "A"} == {
        "transformers", "metagen", "metagen-int8", "metagen-w8a8", "metagen-int4",
        "metagen-int4-all"}
    assert all(ok is not False for ok in data["checks"].values()), data["checks"]
    assert data["checks"]["A greedy tokens equal across peers, 1 thread"] is True  # float32
    assert data["checks"]["D draft-int8: speculative == greedy, all peers, 1 thread"] is True
    assert data["checks"]["D draft-int8-tree: speculative == greedy, all peers, 1 thread"] is True
    assert any("tree 1 " in r["variant"] for r in data["rows"] if r["peer"] == "metagen")
    assert {r["peer"] for r in data["rows"] if "draft-int8" in r["variant"]} == {
        "metagen", "metagen-int8", "metagen-w8a8", "metagen-int4",
        "metagen-int4-all"}  # the int8 draft is metagen's
    # (speculative_quantization)
    assert 0 <= data["checks"]["A int8 greedy tokens equal metagen float32 (share), 1 thread"] <= 1
    roof = data["roofline"]  # int8 streams about a quarter of the float32 bytes per token
    assert roof["decode_read_bytes"] / 4 < roof["int8_decode_read_bytes"] < roof[
        "decode_read_bytes"] / 3
    peer_bytes = roof["peer_decode_read_bytes"]
    # int4 layers and an int8 head: fewer bytes than int8 throughout; the head in int4 too, fewer
    assert peer_bytes.pop("metagen-int4-all") < peer_bytes.pop("metagen-int4") < roof[
        "int8_decode_read_bytes"]
    assert peer_bytes == {"metagen-int8": roof["int8_decode_read_bytes"],
                          "metagen-w8a8": roof["int8_decode_read_bytes"]}
    for row in data["rows"]:
        assert len(row["times"]) >= 1 and row["time"]["min"] <= row["time"]["median"]
    e = [r for r in data["rows"] if r["workload"] == "E"]
    assert e[0]["tokens"] == e[1]["tokens"]  # the search and best-of-n do the same work
    assert "llama.cpp" in data["skipped_peers"]
    mem = data["memory"]  # the engine's peak memory in a fresh process, parts that add up
    assert mem["peak_rss"] == mem["base_rss"] + mem["weights"] + mem["kv_cache"] + mem["overhead"]
    assert mem["kv_cache"] <= 256 << 10 and mem["stress_tokens"] > mem["kv_budget_tokens"]


def test_every_workload_runs_at_each_thread_count_under_the_cpus_isa(tmp_path, capsys) -> None:
    out = tmp_path / "bench.json"
    assert engine_bench.main(["--quick", "--workloads", "AM", "--json", str(out),
                              "--cache-dir", str(tmp_path / "models"), "--threads", "1,2"]) == 0
    data = json.loads(out.read_text())
    cpu = data["meta"]["cpu"]
    assert cpu["isa"] == vector_isa() in {"avx512f", "avx2", "none"} and cpu["model"] == cpu_model()
    assert data["meta"]["threads"] == [1, 2]
    assert {k: r["threads"] for k, r in data["rooflines"].items()} == {"1": 1, "2": 2}
    runs = sorted((r["threads"], r["peer"]) for r in data["rows"] if r["workload"] == "A")
    assert runs == [(t, p) for t in (1, 2)
                    for p in ("metagen", "metagen-int4", "metagen-int4-all", "metagen-int8",
                              "metagen-w8a8", "transformers")]
    assert {k for k in data["checks"]} == {
        f"A {what}, {t}" for what in ("greedy tokens equal across peers",
                                      "int8 greedy tokens equal metagen float32 (share)",
                                      "metagen-w8a8 greedy tokens equal metagen float32 (share)",
                                      "metagen-int4 greedy tokens equal metagen float32 (share)",
                                      "metagen-int4-all greedy tokens equal metagen float32 "
                                      "(share)")
        for t in ("1 thread", "2 threads")}
    assert data["memory"]["peak_rss"] > 0  # M runs once, at the first count
    table = capsys.readouterr().out
    assert f"ISA {vector_isa()}" in table.splitlines()[0] and cpu_model() in table.splitlines()[0]


def test_bench_rejects_unknown_workload_and_bad_threads() -> None:
    with pytest.raises(SystemExit) as e:
        engine_bench.main(["--workloads", "AZ"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        engine_bench.main(["--threads", "0"])
    assert e.value.code == 2


def test_metagen_bench_engine_prints_the_checkout_command() -> None:
    res = CliRunner().invoke(bench, ["engine", "--quick", "--json", "out dir/b.json"])
    assert res.exit_code == 2
    assert "python -m benchmarks.engine_bench --quick --json 'out dir/b.json'" in res.output
