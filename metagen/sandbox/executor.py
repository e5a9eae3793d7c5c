"""The interface every sandbox backend implements."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult


@runtime_checkable
class Executor(Protocol):
    """Runs one Python program under :class:`Limits` and reports an :class:`ExecResult`.

    Contract: ``program`` is Python source run as the main module in a fresh work directory that
    also holds ``files`` (relative names); stdin is closed unless ``stdin`` is given; nothing of
    the run survives its return (processes, files, cgroups). A failure of the sandbox itself is
    status ``sandbox_error``, never an exception about the program. Without the caller's opt-in
    to code execution, ``run`` raises :class:`metagen.errors.CodeExecutionNotAllowed` before
    starting anything. ``name`` is the backend's name; ``claims`` the guarantees it gives.
    """

    name: str

    def run(self, program: str, *, stdin: str | None = None,
            files: Mapping[str, str | bytes] | None = None,
            limits: Limits = Limits()) -> ExecResult: ...
