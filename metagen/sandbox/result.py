"""The outcome of one sandboxed run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "crashed", "sandbox_error"]
"""``ok``: exit code 0. ``error``: nonzero exit. ``timeout``: wall or CPU limit reached.
``memory``: memory limit reached (killed, or the program died of ``MemoryError``).
``output_limit``: stdout or stderr passed ``max_output_bytes`` and the run was ended.
``crashed``: killed by a fault signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT).
``sandbox_error``: the sandbox itself failed; the program's behaviour is unknown, so this must
never be scored as the program failing."""

STATUSES: tuple[Status, ...] = (
    "ok", "error", "timeout", "memory", "output_limit", "crashed", "sandbox_error")


@dataclass(frozen=True)
class ExecResult:
    """What one run did. ``stdout``/``stderr`` hold at most ``max_output_bytes`` each, decoded
    as UTF-8 with replacement; the ``*_truncated`` flags say whether more was written.
    ``exit_code`` is None when the program died of a signal (then ``signal`` names it) or never
    started (under bubblewrap, whose init reports a signal as ``128 + signal``, an exit code
    above 128 reads as that signal). ``wall_seconds`` is measured by the parent;
    ``cpu_seconds`` is user + system time of the run's processes (from the run's cgroup where
    there is one, else of the reaped tree). ``detail`` explains a ``sandbox_error``."""

    status: Status
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    wall_seconds: float
    cpu_seconds: float
    backend: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"
