"""``python -m benchmarks.sandbox_throughput --quick`` end to end (no timing asserted): every run
of every peer succeeded, the ratios are the rates' quotients against the right baseline, the
table and JSON agree, and the E20 check passed N/N (or says why it was skipped)."""

from __future__ import annotations

import json
import sys

import pytest

from benchmarks import sandbox_throughput as bench
from metagen.sandbox import preflight


def test_quick_run_writes_consistent_json_and_table(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "sandbox.json"
    monkeypatch.setattr(sys, "argv", ["sandbox_throughput", "--quick", "--json", str(out)])
    bench.main()
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    found = preflight()
    meta, rows = data["meta"], data["throughput"]
    assert meta["quick"] is True and meta["parallel"] == [1, 2] and meta["runs"] == 4
    assert meta["sandbox"] == found.backend and meta["cgroup"] == found.cgroup
    assert {"subprocess", "unsafe-local", "bubblewrap"} <= set(rows)
    assert rows["bubblewrap"]["available"] is (found.backend == "bubblewrap")
    for name, row in rows.items():
        assert name in printed
        if not row["available"]:
            assert "apt-get install" in row["note"]
            continue
        base = "subprocess (system python)" if row["python"] == bench.SYSTEM_PYTHON \
            and "subprocess (system python)" in rows else "subprocess"
        for p in ("1", "2"):
            got = row["by_parallel"][p]
            if name == "bubblewrap (no cgroup)":
                # Without a pids cgroup, RLIMIT_NPROC stands in, and it also counts finished
                # runs' processes that are not reaped yet: a spawn may fail, but only ever as
                # a sandbox_error, never as a result.
                assert set(got["failure_reasons"]) <= {"sandbox_error"}
            else:
                assert got["failures"] == 0, (name, p, got["failure_reasons"])
            assert got["runs_per_s"] == max(r["runs_per_s"] for r in got["repeats"]) > 0
            assert got["over_subprocess_same_python"] == pytest.approx(
                got["runs_per_s"] / rows[base]["by_parallel"][p]["runs_per_s"])
    assert rows["subprocess"]["by_parallel"]["1"]["over_subprocess_sys_executable"] == 1.0
    e20 = data["e20"]
    if found.backend is None:
        assert "apt-get install" in e20["skipped"]
    else:
        assert e20["parallel"] == meta["cpu_count"] and e20["failures"] == []
        assert e20["passed"] == e20["runs"] == 4 and "4/4 passed" in printed


def test_the_e20_check_tells_a_wrong_solution_apart(default_sandbox) -> None:
    """The E20 count means something: its tests pass the solution and fail a wrong one."""
    found = preflight()
    assert bench.stable_under_load(2, 2, found)["passed"] == 2
    wrong = bench.SOLUTION.replace("i * i <= n", "i * i < n")  # 4, 9, 25 become "prime"
    ex = bench.BubblewrapExecutor(use_cgroup=found.cgroup, allow_code_execution=True)
    outcome = bench.run_tests(ex, wrong, bench.TESTS, limits=bench.LIMITS)
    assert outcome.scored and not outcome.passed and outcome.result.status == "error"
