"""Sandbox throughput: runs per second of a trivial program (``print(1)``) through plain
``subprocess.run``, the ``unsafe-local`` backend and the ``bubblewrap`` backend, side by side in
one run at each parallelism (threads submitting runs); then row E20: the same correct
solution passes N/N times through ``run_tests`` at parallelism = ``os.cpu_count()``.

    python -m benchmarks.sandbox_throughput [--quick] [--runs N] [--parallel 1,2]
                                            [--repeats R] [--json PATH]

Each peer's ratio is over plain ``subprocess.run([python, "-I", "-c", ...])`` with the *same
interpreter*: ``unsafe-local`` runs ``sys.executable``, bubblewrap the system ``/usr/bin/python3``
(a virtual environment's interpreter can start several times slower than the system one, from
its site-packages' ``.pth`` files alone), and the ratio over ``sys.executable`` is given too.
Bubblewrap runs with a per-run cgroup when the preflight finds cgroups writable (the output says
which), and then also without one, to show what the cgroup costs. Rows of one repeat run back to
back, repeats interleave the peers; a row's rate is the best repeat. Every run is checked
(status ok, stdout ``1``): a rate counts successful runs only, and failures are listed by
status. Never asserted in tests (``tests/benchmarks`` runs ``--quick`` for the output's shape).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from metagen.sandbox import (
    BubblewrapExecutor, Executor, Limits, Preflight, UnsafeLocalExecutor, preflight, run_tests)
from metagen.sandbox.bubblewrap import SYSTEM_PYTHON
from metagen.sandbox.preflight import INSTALL_HINT

PROGRAM = "print(1)"
SOLUTION = '''def is_prime(n):
    if n < 2:
        return False
    i = 2
    while i * i <= n:
        if n % i == 0:
            return False
        i += 1
    return True
'''
TESTS = '''assert [n for n in range(30) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19, 23, 29]
assert is_prime(7919) and not is_prime(7917) and not is_prime(-3)
'''
LIMITS = Limits(wall_seconds=10, cpu_seconds=10)

Run = Callable[[], str | None]  # one run: None when it succeeded, else what went wrong


def subprocess_run(python: str) -> Run:
    """Plain ``subprocess.run`` of ``PROGRAM`` (no limits, no isolation): the floor."""
    def one() -> str | None:
        proc = subprocess.run([python, "-I", "-c", PROGRAM], capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=LIMITS.wall_seconds)
        ok = proc.returncode == 0 and proc.stdout == b"1\n"
        return None if ok else f"exit {proc.returncode}"
    return one


def executor_run(executor: Executor) -> Run:
    def one() -> str | None:
        res = executor.run(PROGRAM, limits=LIMITS)
        return None if res.ok and res.stdout == "1\n" else res.status
    return one


def rate(run: Run, runs: int, parallel: int) -> dict[str, Any]:
    """``runs`` runs from ``parallel`` threads: successful runs per second (a failed run
    counts for its time only) and the failures by reason."""
    with ThreadPoolExecutor(parallel) as pool:
        list(pool.map(lambda _: run(), range(parallel)))  # warm up (page cache, imports)
        t0 = time.perf_counter()
        outcomes = list(pool.map(lambda _: run(), range(runs)))
        seconds = time.perf_counter() - t0
    failures = Counter(o for o in outcomes if o is not None)
    ok = runs - sum(failures.values())
    return {"runs_per_s": ok / seconds, "seconds": seconds, "failures": dict(failures)}


def peers(found: Preflight) -> dict[str, tuple[str, Run | None, str]]:
    """name -> (interpreter, run or None when unavailable, note)."""
    table: dict[str, tuple[str, Run | None, str]] = {
        "subprocess": (sys.executable, subprocess_run(sys.executable), "sys.executable")}
    if os.path.realpath(SYSTEM_PYTHON) != os.path.realpath(sys.executable):
        table["subprocess (system python)"] = (
            SYSTEM_PYTHON, subprocess_run(SYSTEM_PYTHON), "the sandbox's interpreter")
    table["unsafe-local"] = (sys.executable, executor_run(
        UnsafeLocalExecutor(allow_code_execution=True)), "rlimits, own session, temp dir")
    if found.backend != "bubblewrap":
        why = "; ".join(found.reasons) + f" ({INSTALL_HINT})"
        table["bubblewrap"] = (SYSTEM_PYTHON, None, "skipped: " + why)
        return table
    table["bubblewrap"] = (SYSTEM_PYTHON, executor_run(BubblewrapExecutor(
        use_cgroup=found.cgroup, allow_code_execution=True)),
        "with per-run cgroup" if found.cgroup else "no cgroup (not writable here)")
    if found.cgroup:
        table["bubblewrap (no cgroup)"] = (SYSTEM_PYTHON, executor_run(BubblewrapExecutor(
            use_cgroup=False, allow_code_execution=True)), "namespaces + rlimits only")
    return table


def throughput(runs: int, parallel: list[int], repeats: int, found: Preflight) -> dict[str, Any]:
    table = peers(found)
    rows: dict[str, dict[str, Any]] = {
        name: {"python": py, "note": note, "available": run is not None, "by_parallel": {}}
        for name, (py, run, note) in table.items()}
    for _ in range(repeats):
        for p in parallel:
            for name, (_, run, _) in table.items():
                if run is not None:
                    got = rows[name]["by_parallel"].setdefault(str(p), {"repeats": []})
                    got["repeats"].append(rate(run, runs, p))
    for name, row in rows.items():
        for p, got in row["by_parallel"].items():
            best = max(got["repeats"], key=lambda r: r["runs_per_s"])
            got["runs_per_s"] = best["runs_per_s"]
            got["failures"] = sum(sum(r["failures"].values()) for r in got["repeats"])
            got["failure_reasons"] = dict(sum(
                (Counter(r["failures"]) for r in got["repeats"]), Counter()))
    same_py = {SYSTEM_PYTHON: "subprocess (system python)", sys.executable: "subprocess"}
    for name, row in rows.items():
        base = rows.get(same_py.get(row["python"], "subprocess"), rows["subprocess"])
        for p, got in row["by_parallel"].items():
            got["over_subprocess_same_python"] = (
                got["runs_per_s"] / base["by_parallel"][p]["runs_per_s"])
            got["over_subprocess_sys_executable"] = (
                got["runs_per_s"] / rows["subprocess"]["by_parallel"][p]["runs_per_s"])
    return rows


def stable_under_load(runs: int, parallel: int, found: Preflight) -> dict[str, Any]:
    """E20: ``SOLUTION`` + ``TESTS`` through :func:`run_tests`, ``runs`` times from
    ``parallel`` threads, on the sandbox the preflight picked."""
    if found.backend != "bubblewrap":
        return {"skipped": "; ".join(found.reasons) + f" ({INSTALL_HINT})"}
    executor = BubblewrapExecutor(use_cgroup=found.cgroup, allow_code_execution=True)
    with ThreadPoolExecutor(parallel) as pool:
        outcomes = list(pool.map(
            lambda _: run_tests(executor, SOLUTION, TESTS, limits=LIMITS), range(runs)))
    failed = [o for o in outcomes if not o.passed]
    walls = sorted(o.result.wall_seconds for o in outcomes)
    return {"backend": executor.name, "cgroup": found.cgroup, "parallel": parallel,
            "runs": runs, "passed": runs - len(failed),
            "failures": [{"status": o.result.status, "detail": o.result.detail[-200:],
                          "stderr": o.result.stderr[-200:]} for o in failed],
            "wall_seconds_median": walls[len(walls) // 2], "wall_seconds_max": walls[-1]}


def run(quick: bool = False, runs: int | None = None, parallel: list[int] | None = None,
        repeats: int | None = None) -> dict[str, Any]:
    runs = runs if runs is not None else (4 if quick else 100)
    repeats = repeats if repeats is not None else (1 if quick else 3)
    parallel = parallel or [1, 2]
    found = preflight()
    return {
        "meta": {"quick": quick, "runs": runs, "repeats": repeats, "parallel": parallel,
                 "cpu_count": os.cpu_count(), "program": PROGRAM,
                 "sandbox": found.backend, "cgroup": found.cgroup,
                 "preflight_reasons": list(found.reasons)},
        "throughput": throughput(runs, parallel, repeats, found),
        "e20": stable_under_load(runs, os.cpu_count() or 1, found),
    }


def render(result: dict[str, Any]) -> str:
    """The table: ratios first, runs/s beside them; then the E20 line."""
    meta = result["meta"]
    ps = [str(p) for p in meta["parallel"]]
    head = (["backend", "python"] + [f"x subprocess same python, P={p}" for p in ps]
            + [f"x subprocess sys.executable, P={p}" for p in ps]
            + [f"runs/s P={p}" for p in ps] + ["failures", "note"])
    lines = [" | ".join(head), " | ".join("---" for _ in head)]
    for name, row in result["throughput"].items():
        got = row["by_parallel"]
        cells = [name, row["python"]]
        if not row["available"]:
            cells += ["-"] * (3 * len(ps) + 1)
        else:
            cells += [f"{got[p]['over_subprocess_same_python']:.2f}x" for p in ps]
            cells += [f"{got[p]['over_subprocess_sys_executable']:.2f}x" for p in ps]
            cells += [f"{got[p]['runs_per_s']:.1f}" for p in ps]
            reasons = sum((Counter(got[p]["failure_reasons"]) for p in ps), Counter())
            cells += [", ".join(f"{n} {r}" for r, n in reasons.most_common()) or "0"]
        lines.append(" | ".join(cells + [row["note"]]))
    e20 = result["e20"]
    cg = "with" if meta["cgroup"] else "without"
    lines.append(f"\nsandbox: {meta['sandbox'] or 'none'} ({cg} per-run cgroups); "
                 f"{meta['runs']} runs per row and repeat, best of {meta['repeats']}")
    if "skipped" in e20:
        lines.append(f"E20 skipped: {e20['skipped']}")
    else:
        lines.append(f"E20 (run_tests, parallel {e20['parallel']}): "
                     f"{e20['passed']}/{e20['runs']} passed; wall median "
                     f"{e20['wall_seconds_median']:.3f} s, max {e20['wall_seconds_max']:.3f} s")
        for f in e20["failures"]:
            lines.append(f"  failed: {f['status']} {f['detail'] or f['stderr']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="4 runs, 1 repeat (a smoke test)")
    ap.add_argument("--runs", type=int, help="runs per row and repeat, and E20's N (100)")
    ap.add_argument("--parallel", type=lambda s: [int(p) for p in s.split(",")],
                    help="comma-separated thread counts for the throughput rows (1,2)")
    ap.add_argument("--repeats", type=int, help="interleaved repeats per row (3)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.runs is not None and args.runs < 1:
        ap.error("--runs must be >= 1")
    if args.parallel is not None and min(args.parallel) < 1:
        ap.error("--parallel must be >= 1")
    if args.repeats is not None and args.repeats < 1:
        ap.error("--repeats must be >= 1")
    result = run(args.quick, args.runs, args.parallel, args.repeats)
    print(render(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
