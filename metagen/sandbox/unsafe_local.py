"""``unsafe-local``: a plain subprocess with rlimits. NOT a sandbox; explicit opt-in only.

The program runs as the calling user in a fresh temporary work directory, with an empty-ish
environment, stdin closed, its own session, CPU / file-size / open-file / address-space rlimits
and the parent's wall clock killing its process group. It can read and write whatever this user
can, reach the network, and escape its process group (``setsid``). Use it only for trusted code
or where nothing else runs; nothing ever selects it silently.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from metagen.sandbox.classify import classify, decode_wait_status
from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult
from metagen.sandbox.rlimits import apply_rlimits, rlimit_table
from metagen.sandbox.supervise import supervise
from metagen.sandbox.workfiles import checked_run

NAME = "unsafe-local"


class UnsafeLocalExecutor:
    """Runs programs as a plain local subprocess (see the module docstring: not isolated).

    ``python``: the interpreter (default ``sys.executable``). ``allow_code_execution``: the
    opt-in (None reads ``METAGEN_ALLOW_CODE_EXECUTION``), checked by every :meth:`run`.
    """

    name = NAME
    contains_host_attacks = False

    def __init__(self, *, python: str = sys.executable,
                 allow_code_execution: bool | None = None) -> None:
        self.python = python
        self.allow_code_execution = allow_code_execution

    def run(self, program: str, *, stdin: str | None = None,
            files: Mapping[str, str | bytes] | None = None,
            limits: Limits = Limits()) -> ExecResult:
        """Run ``program`` as ``main.py`` in a temporary directory removed afterwards."""
        contents = checked_run(self.allow_code_execution, program, files, limits)
        work = tempfile.mkdtemp(prefix=f"metagen_unsafe_{os.getpid()}_")
        try:
            for name, data in contents.items():
                path = Path(work, name)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
            table = rlimit_table(limits, address_space=limits.memory_bytes)
            env = {"HOME": work, "TMPDIR": work, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}

            def kill_tree(pid: int) -> None:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

            sup = supervise([self.python, "-I", "-B", "main.py"], env=env, cwd=work,
                            stdin=None if stdin is None else stdin.encode(),
                            wall_seconds=limits.wall_seconds,
                            max_output_bytes=limits.max_output_bytes, kill_tree=kill_tree,
                            preexec_fn=lambda: apply_rlimits(table))
            exit_code, sig = decode_wait_status(sup.wait_status)
            return classify(sup, limits, NAME, exit_code=exit_code, sig=sig)
        finally:
            shutil.rmtree(work, ignore_errors=True)
