"""``python -m benchmarks.serve_load --quick`` end to end (no timing asserted): no non-2xx
answer, the ratios are the quotients of the rates they name, latencies are ordered, the server's
open files do not grow over the load (one keep-alive socket may be open at either reading), the server's best-of-16 chose what the library
chose, and the table shows the JSON's numbers."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import serve_load as bench


def test_quick_run_writes_consistent_json_and_table(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "serve.json"
    monkeypatch.setattr(sys, "argv", ["serve_load", "--quick", "--json", str(out)])
    bench.main()
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert list(data["targets"]) == ["metagen"] and data["ratios"] == {}
    mine = data["targets"]["metagen"]
    load, one, bo = mine["load"], mine["one_stream"], mine["best_of_16"]
    assert data["meta"]["quick"] is True and data["meta"]["clients"] == 4
    assert load["non_2xx"] == 0 and not one["non_2xx"] and load["requests_ok"] > 0
    assert load["tokens"] == load["requests_ok"] * bench.MAX_TOKENS  # EOS ignored: all counted
    assert load["over_one_stream"] == pytest.approx(load["tokens_per_s"] / one["tokens_per_s"])
    assert 0 < load["ttft_ms_p50"] <= load["ttft_ms_p99"]
    assert 0 < load["itl_ms_p50"] <= load["itl_ms_p99"]
    sampled = mine["samples"]  # --quick: 2 prompts x n 4, EOS ignored
    assert sampled["tokens"] == sampled["requests"] * sampled["n"] * bench.MAX_TOKENS
    assert sampled["tokens_per_s"] == pytest.approx(sampled["tokens"] / sampled["wall_s"])
    procs = mine["server_process"]
    assert procs["end"]["open_fds"] <= procs["start"]["open_fds"] + 1  # a leak grows per request
    assert bo["same_choice"] is True
    assert bo["server_over_library"] == pytest.approx(bo["server_s"] / bo["library_s"])
    assert f"{load['requests_ok']} / 0" in printed and f"{bo['server_over_library']:.2f}x" in printed


def test_percentile_is_the_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert bench.percentile(values, 0.5) == 50.0
    assert bench.percentile(values, 0.99) == 99.0
    assert bench.percentile([3.0, 1.0, 2.0], 1.0) == 3.0
    assert bench.percentile([], 0.5) is None


def test_process_stats_sum_over_the_process_tree() -> None:
    """A child's memory and open files count toward its parent's (vLLM's engine core is a
    child of its API server): the tree of a shell with a sleeping child holds both."""
    import os
    import subprocess
    import time

    proc = subprocess.Popen(["bash", "-c", "sleep 30 & wait"])
    try:
        deadline = time.monotonic() + 10
        while len(bench.process_tree(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        tree = bench.process_tree(proc.pid)
        assert tree[0] == proc.pid and len(tree) == 2
        alone = bench.process_stats(tree[1])
        both = bench.process_stats(proc.pid)
        assert both["rss_kib"] > alone["rss_kib"] > 0
        assert both["open_fds"] >= alone["open_fds"] + 3  # the shell's stdin/out/err at least
        assert os.getpid() not in tree
    finally:
        for pid in reversed(bench.process_tree(proc.pid)):
            os.kill(pid, 15)
        proc.wait(10)


def test_unknown_target_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="targets: unknown"):
        bench.run(quick=True, targets=("metagen", "sglang"))


@pytest.mark.slow
def test_quick_run_against_a_real_vllm_server(tmp_path, capsys) -> None:
    """Both targets through the same clients: vLLM answers every request (the load's streams
    and the samples' n = 4 requests, EOS ignored, so every token is counted), the ratios are the
    quotients of the targets' rates, and the table has a column per target."""
    from benchmarks.peers.vllm_server import SETUP, vllm_python

    if vllm_python() is None:
        pytest.skip(f"the vLLM peer is not installed ({SETUP})")
    data = bench.run(quick=True, targets=("metagen", "vllm"), logs=tmp_path)
    assert data["skipped"] == {} and list(data["targets"]) == ["metagen", "vllm"]
    theirs, mine = data["targets"]["vllm"], data["targets"]["metagen"]
    assert theirs["load"]["non_2xx"] == 0 and theirs["load"]["requests_ok"] > 0
    assert theirs["load"]["tokens"] == theirs["load"]["requests_ok"] * bench.MAX_TOKENS
    sampled = theirs["samples"]
    assert sampled["tokens"] == sampled["requests"] * sampled["n"] * bench.MAX_TOKENS
    assert theirs["best_of_16"] is None  # a metagen extension: not asked of vLLM
    assert theirs["server_process"]["start"]["rss_kib"] > 0
    for key in ("one_stream", "load", "samples"):
        assert data["ratios"]["vllm"][key] == pytest.approx(
            mine[key]["tokens_per_s"] / theirs[key]["tokens_per_s"])
    printed = bench.table(data)
    assert "| measure | metagen | vllm |" in printed and "metagen / vllm" in printed
