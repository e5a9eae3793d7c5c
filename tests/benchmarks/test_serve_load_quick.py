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
    load, one, bo = data["load"], data["one_stream"], data["best_of_16"]
    assert data["meta"]["quick"] is True and data["meta"]["clients"] == 4
    assert load["non_2xx"] == 0 and not one["non_2xx"] and load["requests_ok"] > 0
    assert load["tokens"] == load["requests_ok"] * bench.MAX_TOKENS  # EOS ignored: all counted
    assert load["over_one_stream"] == pytest.approx(load["tokens_per_s"] / one["tokens_per_s"])
    assert 0 < load["ttft_ms_p50"] <= load["ttft_ms_p99"]
    assert 0 < load["itl_ms_p50"] <= load["itl_ms_p99"]
    procs = data["server_process"]
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
