"""Backends under test, the rows each one claims, and helpers that find leftover processes."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

from metagen.sandbox import BubblewrapExecutor, UnsafeLocalExecutor, preflight
from metagen.sandbox.preflight import INSTALL_HINT

BACKENDS = ("bubblewrap", "unsafe-local")
# Rows the unsafe-local backend does not claim (it is not a sandbox); marked xfail(strict).
UNSAFE_UNCLAIMED = {
    "E6": "a plain subprocess cannot follow a setsid'd grandchild out of its process group",
    "E7": "a plain subprocess shares the host network",
    "E8": "a plain subprocess writes wherever the user can",
    "E9": "a plain subprocess reads whatever the user can",
    "E10-total": "a plain subprocess has no disk quota (only the per-file size rlimit)",
    "E15-read": "plain subprocesses of one user can read each other's work dirs",
}
# Rows a backend cannot even attempt without endangering the host: skipped, not run.
UNSAFE_UNSAFE_TO_RUN = {
    "E5": "a fork bomb is only run where a per-run pids cgroup contains it",
    "E14-kill": "kill(-1, 9) is only run inside a pid namespace",
    "E15-kill": "kill(-1, 9) is only run inside a pid namespace",
    "E10-shm": "filling /dev and /dev/shm is only run where they are the sandbox's own",
}

_PREFLIGHT = []


def _preflight():
    if not _PREFLIGHT:
        _PREFLIGHT.append(preflight())
    return _PREFLIGHT[0]


@pytest.fixture(params=BACKENDS)
def executor(request):
    """One executor per backend, opted in explicitly."""
    if request.param == "bubblewrap":
        found = _preflight()
        if found.backend != "bubblewrap":
            pytest.skip("no working bubblewrap sandbox here: " + "; ".join(found.reasons)
                        + f" ({INSTALL_HINT})")
        return BubblewrapExecutor(use_cgroup=found.cgroup, allow_code_execution=True)
    return UnsafeLocalExecutor(allow_code_execution=True)


def claim(request, executor, row: str) -> None:
    """Mark the running test xfail(strict) where ``executor`` does not claim ``row``, or skip
    it where attempting the row would endanger the host."""
    if executor.name == "unsafe-local":
        if row in UNSAFE_UNSAFE_TO_RUN:
            pytest.skip(UNSAFE_UNSAFE_TO_RUN[row])
        if row in UNSAFE_UNCLAIMED:
            request.node.add_marker(pytest.mark.xfail(strict=True,
                                                      reason=UNSAFE_UNCLAIMED[row]))
    elif row in ("E5", "E14-kill", "E15-kill") and not executor.contains_host_attacks:
        pytest.skip("the preflight found no writable per-run cgroup to contain this attack")


def token() -> str:
    return "metagen-sbx-test-" + secrets.token_hex(8)


def processes_with(tok: str) -> list[int]:
    """Pids whose command line contains ``tok``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if tok.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def kill_all_with(tok: str) -> list[int]:
    """Kill (test cleanup) and return whatever carries ``tok``; waits briefly for exits."""
    pids = processes_with(tok)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    time.sleep(0.05) if pids else None
    return pids
