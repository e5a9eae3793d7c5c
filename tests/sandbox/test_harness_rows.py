"""Rows E16-E22: positive evidence of a pass, comparison in the parent, crash and sandbox-error
classification, cleanup, stability under load, the opt-in, and the preflight."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from metagen.errors import CodeExecutionNotAllowed, InvalidParameterError, SandboxUnavailable
from metagen.sandbox import (
    BubblewrapExecutor, Limits, UnsafeLocalExecutor, check_code_execution, default_executor,
    preflight, run, run_function, run_tests)
from metagen.sandbox.cgroup import CONTROLLERS, OPTIONAL, own_cgroup_dir

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
QUICK = Limits(wall_seconds=10, cpu_seconds=5)


def test_e16_pass_needs_the_sentinel(executor):
    assert run_tests(executor, SOLUTION, TESTS, limits=QUICK).passed
    early = "import os\nos._exit(0)\n" + SOLUTION
    out = run_tests(executor, early, TESTS, limits=QUICK)
    assert not out.passed and out.status == "failed" and out.scored
    assert "exited with code 0 during the program's load" in out.reason
    assert not run_tests(executor, SOLUTION, "assert add(1, 2) == 4\n", limits=QUICK).passed
    fake = SOLUTION + "print('METAGEN-TESTS-PASSED 0000')\nimport sys\nsys.exit(0)\n"
    assert not run_tests(executor, fake, TESTS, limits=QUICK).passed


def test_e17_always_equal_object_does_not_match(executor):
    hacked = ("class E:\n    def __eq__(self, o):\n        return True\n"
              "def add(a, b):\n    return E()\n")
    outs, _ = run_function(executor, hacked, "add", [[1, 2]], limits=QUICK)
    assert outs == [None]
    outs, _ = run_function(executor, SOLUTION, "add", [[1, 2], ["a", "b"], [1, None]],
                           limits=QUICK)
    assert outs == ["3", '"ab"', None]


def test_e18_segfault_is_crashed(executor):
    res = executor.run("import ctypes\nctypes.string_at(0)\n", limits=QUICK)
    assert res.status == "crashed" and res.signal == 11


def test_e18_a_sandbox_that_cannot_start_is_sandbox_error(executor):
    if executor.name == "bubblewrap":
        broken = BubblewrapExecutor(bwrap="/nonexistent/bwrap", allow_code_execution=True)
    else:
        broken = UnsafeLocalExecutor(python="/nonexistent/python", allow_code_execution=True)
    res = broken.run("print(1)", limits=QUICK)
    assert res.status == "sandbox_error" and res.detail
    out = run_tests(broken, SOLUTION, TESTS, limits=QUICK)
    assert not out.passed and not out.scored  # never scored as the program failing


def _leftover_cgroups() -> list[Path]:
    found: list[Path] = []
    for controller in CONTROLLERS + OPTIONAL:
        base = own_cgroup_dir(controller)
        if base is not None:
            found += list(base.glob(f"metagen-sandbox-{os.getpid()}-*"))  # ours only:
            # other processes on this machine may be running sandboxes right now
    return found


def _unsafe_workdirs() -> set[str]:
    import tempfile
    return {p.name for p in Path(tempfile.gettempdir()).glob(f"metagen_unsafe_{os.getpid()}_*")}


@pytest.mark.parametrize("runs", [20, pytest.param(200, marks=pytest.mark.slow)],
                         ids=lambda n: f"x{n}")
def test_e19_many_runs_leave_nothing_behind(executor, runs):
    before_dirs = _unsafe_workdirs()
    executor.run("print(1)", limits=QUICK)  # warm up lazily opened fds
    fds = len(os.listdir("/proc/self/fd"))
    for i in range(runs):
        prog = "print(1)" if i % 4 else "import os\nif os.fork() == 0:\n    import time\n" \
            "    time.sleep(100)\n"
        assert executor.run(prog, limits=Limits(wall_seconds=5)).status == "ok"
    assert len(os.listdir("/proc/self/fd")) == fds
    assert _leftover_cgroups() == []
    assert _unsafe_workdirs() == before_dirs
    try:  # no zombie child left to reap; live children of other fixtures (a browser) may stay
        assert os.waitpid(-1, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        pass  # no children at all


@pytest.mark.parametrize("runs", [16, pytest.param(50, marks=pytest.mark.slow)],
                         ids=lambda n: f"x{n}")
def test_e20_every_run_passes_at_parallel_two(executor, runs):
    with ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(lambda _: run_tests(executor, SOLUTION, TESTS, limits=QUICK),
                             range(runs)))
    assert sum(o.passed for o in outs) == runs, [o.result for o in outs if not o.passed][:2]


def test_e21_nothing_runs_without_the_opt_in(executor, monkeypatch, tmp_path):
    monkeypatch.delenv("METAGEN_ALLOW_CODE_EXECUTION", raising=False)
    marker = tmp_path / "ran"
    prog = f"open({str(marker)!r}, 'w').write('x')\n"
    cls = type(executor)
    for flag in (None, False):
        with pytest.raises(CodeExecutionNotAllowed, match="allow_code_execution"):
            cls(allow_code_execution=flag).run(prog)
        with pytest.raises(CodeExecutionNotAllowed):
            check_code_execution(flag, backend=executor.name)
    with pytest.raises(CodeExecutionNotAllowed):
        run(prog, backend=executor.name)
    monkeypatch.setenv("METAGEN_ALLOW_CODE_EXECUTION", "1")
    with pytest.raises(CodeExecutionNotAllowed):  # an explicit False wins over the env
        cls(allow_code_execution=False).run(prog)
    assert not marker.exists()
    assert cls().run("print(2)", limits=QUICK).stdout == "2\n"  # the env opts in


def test_e22_preflight_names_the_backend_or_refuses(executor):
    found = preflight()
    assert found.backend in ("bubblewrap", None)
    missing = preflight(bwrap="/nonexistent/bwrap")
    assert missing.backend is None and any("not found" in r for r in missing.reasons)
    with pytest.raises(SandboxUnavailable, match="unsafe-local"):
        default_executor(allow_code_execution=True, bwrap="/nonexistent/bwrap")
    chosen = check_code_execution(True, backend=executor.name)
    assert chosen.name == executor.name  # unsafe-local only when named
    if found.backend is not None:
        assert check_code_execution(True).name == "bubblewrap"


def test_limits_are_validated_naming_the_field():
    for field, bad in (("wall_seconds", 0), ("cpu_seconds", float("nan")),
                       ("memory_bytes", 1.5), ("max_processes", 0), ("disk_bytes", -1),
                       ("max_output_bytes", True), ("max_open_files", 3)):
        with pytest.raises(InvalidParameterError, match=field):
            Limits(**{field: bad})
    with pytest.raises(InvalidParameterError, match="files"):
        UnsafeLocalExecutor(allow_code_execution=True).run("", files={"../x": "y"})
    with pytest.raises(InvalidParameterError, match="backend"):
        default_executor(allow_code_execution=True, backend="docker")
