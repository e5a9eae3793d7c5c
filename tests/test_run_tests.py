"""``make test``'s runner (scripts/run_tests.py): every failure reported, a non-zero exit status if
any pass fails, and a last line that is a pytest summary never hiding a failure."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT

SCRIPT = ROOT / "scripts" / "run_tests.py"
_spec = importlib.util.spec_from_file_location("run_tests", SCRIPT)
assert _spec is not None and _spec.loader is not None
run_tests = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_tests)


@pytest.mark.parametrize("line, want", [
    ("2655 passed, 94 skipped in 577.03s (0:09:37)", ({"passed": 2655, "skipped": 94}, 577.03)),
    ("===== 1 failed, 3 passed, 1 warning, 2 errors in 2.50s =====",
     ({"failed": 1, "passed": 3, "warnings": 1, "errors": 2}, 2.5)),
    ("1 error in 0.10s", ({"errors": 1}, 0.1)),
    ("no tests ran in 0.01s", ({}, 0.01)),
    ("FAILED tests/x.py::test_y - assert 1 < 0", None),
    ("tests/engine/test_x.py ....    [ 40%]", None),
])
def test_parse_summary_reads_pytest_closing_lines(line, want):
    assert run_tests.parse_summary(line) == want


def test_combined_line_sums_both_passes_and_counts_mypy_and_crashes_as_errors():
    avx2 = (1, "2 failed, 900 passed, 10 skipped in 100.00s (0:01:40)")
    full = (0, "2655 passed, 94 skipped in 577.00s (0:09:37)")
    line = run_tests.combine([avx2, full], mypy_failed=True)
    assert line.startswith("2 failed, 3555 passed, 104 skipped, 1 errors in 677.00s")
    assert run_tests.parse_summary(line) == (
        {"failed": 2, "passed": 3555, "skipped": 104, "errors": 1}, 677.0)
    crashed = run_tests.combine([(134, "Fatal Python error: Aborted"), full], mypy_failed=False)
    assert crashed.startswith("2655 passed, 94 skipped, 1 errors in 577.00s")


FAULT = '''
import os


def test_fails_only_under_the_avx2_caps():
    assert os.environ.get("ATEN_CPU_CAPABILITY") != "avx2"


def test_passes():
    assert True
'''


def _run(tmp_path: Path, *args: str) -> tuple[int, list[str]]:
    test = tmp_path / "test_fault.py"
    test.write_text(FAULT)
    env = {k: v for k, v in os.environ.items() if k not in run_tests.AVX2_CAPS}
    done = subprocess.run([sys.executable, str(SCRIPT), "--skip-mypy", "--avx2-paths", str(test),
                           "--paths", str(test), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.stderr == ""
    return done.returncode, done.stdout.strip().splitlines()


def test_a_failure_in_the_avx2_pass_alone_fails_make_test_scripted_fault(tmp_path):
    """A scripted test that fails only under the AVX2 caps: the full run passes, yet the exit
    status is 1 and the last line is a summary counting the AVX2 pass's failure."""
    rc, lines = _run(tmp_path, "--avx2-pass", "yes")
    assert rc == 1
    assert run_tests.parse_summary(lines[-1]) is not None
    assert run_tests.parse_summary(lines[-1])[0] == {"failed": 1, "passed": 3}
    assert any(line.startswith("FAILED") and "test_fails_only_under_the_avx2_caps" in line
               for line in lines)


def test_without_the_avx2_pass_the_last_line_is_the_full_runs_own_summary_scripted_fault(
        tmp_path):
    rc, lines = _run(tmp_path, "--avx2-pass", "no")
    assert rc == 0
    assert run_tests.parse_summary(lines[-1])[0] == {"passed": 2}
