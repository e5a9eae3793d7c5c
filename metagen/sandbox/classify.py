"""Turning a supervised child's raw outcome into an :class:`ExecResult`."""

from __future__ import annotations

import math
import os
import signal as _signal

from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult, Status
from metagen.sandbox.supervise import Supervised

FAULT_SIGNALS = frozenset({_signal.SIGSEGV, _signal.SIGBUS, _signal.SIGILL, _signal.SIGFPE,
                           _signal.SIGABRT})


def classify(sup: Supervised, limits: Limits, backend: str, *, exit_code: int | None,
             sig: int | None, oom_killed: bool = False, detail: str = "") -> ExecResult:
    """The status of one run, most specific first: sandbox failure, output cap, wall clock,
    memory, CPU, fault signal, exit code. ``exit_code``/``sig`` are the program's (the backend
    decodes them from the wait status); ``oom_killed`` is the cgroup's verdict."""
    stderr_tail = sup.stderr[-4096:]
    status: Status
    if sup.spawn_error or detail:
        status = "sandbox_error"
    elif sup.output_exceeded:
        status = "output_limit"
    elif sup.timed_out:
        status = "timeout"
    elif oom_killed or (exit_code not in (0, None) and b"MemoryError" in stderr_tail):
        status = "memory"
    elif sig in (_signal.SIGXCPU, _signal.SIGKILL) and max(
            sup.cpu_seconds, sup.wall_seconds) >= math.ceil(limits.cpu_seconds) - 0.05:
        # RLIMIT_CPU kills with SIGXCPU/SIGKILL; where the tree's CPU time is unknown, wall
        # time (never less than CPU time for a single-threaded program) stands in for it.
        status = "timeout"
    elif sig == _signal.SIGXFSZ:
        status = "error"
    elif sig in FAULT_SIGNALS:
        status = "crashed"
    elif sig is not None:
        status = "error"
    else:
        status = "ok" if exit_code == 0 else "error"
    return ExecResult(
        status=status, exit_code=exit_code, signal=sig,
        stdout=sup.stdout.decode("utf-8", "replace"), stderr=sup.stderr.decode("utf-8", "replace"),
        stdout_truncated=sup.stdout_truncated, stderr_truncated=sup.stderr_truncated,
        wall_seconds=sup.wall_seconds, cpu_seconds=sup.cpu_seconds, backend=backend,
        detail=detail or sup.spawn_error)


def decode_wait_status(status: int | None) -> tuple[int | None, int | None]:
    """``(exit_code, signal)`` of a raw wait status; ``(None, None)`` when there is none."""
    if status is None:
        return None, None
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None
