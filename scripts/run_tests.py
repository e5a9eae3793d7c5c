"""``make test``: mypy (``metagen`` and ``benchmarks``), then the test suite, reporting every
failure (no ``-x``).

On a CPU with AVX-512 the engine and decoding tests run first a second time the way an
AVX2-only CPU computes (:data:`AVX2_CAPS`: metagen's kernels built for AVX2, ATen's and MKL's
kernel dispatch capped at AVX2), since those numerics differ from the AVX-512 ones; on a CPU
without AVX-512 the full run already is that run and the pass is skipped with one line saying so.
The full suite runs last. Tests marked ``slow`` (long end-to-end checks: every MBPP and
HumanEval reference through the sandbox, 200 sandbox runs, real peers) are left to
``make test-slow``. Contract:

- the exit status is non-zero if mypy, the AVX2 pass or the full run fails;
- the last line printed is a pytest summary line: the full run's own one when everything before
  it passed, else a combined line (counts of both passes summed, mypy's failure counted as one
  error), so the last line never hides a failure.

Usage: ``python scripts/run_tests.py [--avx2-pass auto|yes|no] [--skip-mypy]
[--avx2-paths P ...] [--paths P ...]`` (the options exist for this script's own tests).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AVX2_CAPS = {"METAGEN_NATIVE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
AVX2_PATHS = ("tests/engine", "tests/decoding")
SELECT = "not slow"  # the slow end-to-end checks run with `make test-slow`
# pytest's order of outcomes in its summary line
ORDER = ("failed", "passed", "skipped", "deselected", "xfailed", "xpassed", "warnings", "errors")
_COUNT = re.compile(r"(\d+) (failed|passed|skipped|deselected|xfailed|xpassed|warnings?|errors?)")
_SECONDS = re.compile(r" in (\d+(?:\.\d+)?)s\b")


def parse_summary(line: str) -> tuple[dict[str, int], float] | None:
    """The outcome counts and seconds of a pytest summary line (``== 1 failed, 3 passed in
    2.0s ==``, with or without the rule, or ``no tests ran in 0.1s``), or ``None`` when ``line``
    is not one. Singular ``warning``/``error`` are counted under ``warnings``/``errors``."""
    seconds = _SECONDS.search(line)
    if seconds is None:
        return None
    counts: dict[str, int] = {}
    for n, kind in _COUNT.findall(line):
        key = {"warning": "warnings", "error": "errors"}.get(kind, kind)
        counts[key] = counts.get(key, 0) + int(n)
    if not counts and "no tests ran" not in line:
        return None
    return counts, float(seconds.group(1))


def format_summary(counts: Mapping[str, int], seconds: float, note: str = "") -> str:
    """A pytest-style summary line: the non-zero counts in pytest's order, then the time."""
    parts = [f"{counts[k]} {k}" for k in ORDER if counts.get(k)]
    if not parts:
        parts = ["no tests ran"]
    return ", ".join(parts) + f" in {seconds:.2f}s" + (f" ({note})" if note else "")


def combine(passes: Sequence[tuple[int, str | None]], mypy_failed: bool) -> str:
    """The combined summary of pytest passes given as (exit status, last line): counts summed;
    a pass that failed without a summary line (a crash) and a failed mypy each count one
    error."""
    total: dict[str, int] = {}
    seconds = 0.0
    for rc, line in passes:
        parsed = parse_summary(line) if line else None
        if parsed is None:
            if rc != 0:
                total["errors"] = total.get("errors", 0) + 1
            continue
        for k, n in parsed[0].items():
            total[k] = total.get(k, 0) + n
        seconds += parsed[1]
    if mypy_failed:
        total["errors"] = total.get("errors", 0) + 1
    note = "AVX2 pass and full run together" if len(passes) > 1 else "full run"
    return format_summary(total, seconds, note + (", mypy failed" if mypy_failed else ""))


def run_streamed(cmd: Sequence[str], env: Mapping[str, str]) -> tuple[int, str | None]:
    """Run ``cmd`` from the project root, echoing its output as it comes; returns the exit
    status and the last non-empty line of output."""
    last: str | None = None
    with subprocess.Popen(list(cmd), cwd=ROOT, env=dict(env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            if line.strip():
                last = line.strip()
    return proc.returncode, last


def has_avx512() -> bool:
    """Whether this CPU reports AVX-512 Foundation (``avx512f`` among its flags, read by the
    package's one /proc/cpuinfo reader)."""
    from metagen.cpuinfo import cpu_flags

    return "avx512f" in cpu_flags()


def _args(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--avx2-pass", choices=("auto", "yes", "no"), default="auto",
                   help="auto: only on a CPU with AVX-512")
    p.add_argument("--skip-mypy", action="store_true")
    p.add_argument("--avx2-paths", nargs="+", default=list(AVX2_PATHS))
    p.add_argument("--paths", nargs="*", default=[], help="default: pytest's testpaths")
    return p.parse_args(argv)


def _avx2_pass_wanted(choice: str) -> bool:
    if choice != "auto":
        return choice == "yes"
    if has_avx512():
        return True
    print("make test: no AVX-512 on this CPU (no avx512f in /proc/cpuinfo), so the full run "
          "below already computes as an AVX2-only CPU does; no separate AVX2 pass", flush=True)
    return False


def main(argv: Sequence[str]) -> int:
    """Run the checks; returns the exit status (see the module docstring)."""
    args = _args(argv)
    start = time.monotonic()
    mypy_failed = False
    if not args.skip_mypy:
        mypy = [sys.executable, "-m", "mypy", "metagen", "benchmarks"]
        mypy_failed = run_streamed(mypy, os.environ)[0] != 0
    pytest = [sys.executable, "-m", "pytest", "-m", SELECT]
    passes: list[tuple[int, str | None]] = []
    if _avx2_pass_wanted(args.avx2_pass):
        caps = " ".join(f"{k}={v}" for k, v in AVX2_CAPS.items())
        print(f"make test: AVX2 pass ({caps}): {' '.join(args.avx2_paths)}", flush=True)
        passes.append(run_streamed(pytest + list(args.avx2_paths), os.environ | AVX2_CAPS))
        print("make test: full run", flush=True)
    passes.append(run_streamed(pytest + list(args.paths), os.environ))
    earlier_failed = mypy_failed or any(rc != 0 for rc, _ in passes[:-1])
    if earlier_failed:
        print(f"make test: failures above (total {time.monotonic() - start:.0f}s); "
              "the line below sums every pass")
        print(combine(passes, mypy_failed))
    final_rc = passes[-1][0]
    return final_rc if final_rc != 0 else int(earlier_failed)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
