"""Running model-written code: an :class:`Executor` protocol, resource :class:`Limits`, typed
:class:`ExecResult` statuses, and backends (``bubblewrap`` by default; ``unsafe-local`` only on
explicit request).

Unit-test grading (:func:`grade_program`, :class:`CodeVerdict`) runs the trusted tests and the
program in two processes inside one run, so that a pass cannot be forged.

Nothing runs without an explicit opt-in (``allow_code_execution=True`` or
``METAGEN_ALLOW_CODE_EXECUTION=1``); :func:`check_code_execution` checks that, and that a
sandbox works here, before any generation.
"""

from __future__ import annotations

from collections.abc import Mapping

from metagen.sandbox.bubblewrap import BubblewrapExecutor
from metagen.sandbox.executor import Executor
from metagen.sandbox.harness import TestOutcome, run_function, run_tests
from metagen.sandbox.limits import Limits
from metagen.sandbox.optin import (
    ENV_ALLOW, code_execution_allowed, require_code_execution_allowed)
from metagen.sandbox.preflight import (
    BACKENDS, Preflight, check_code_execution, default_executor, preflight)
from metagen.sandbox.result import STATUSES, ExecResult, Status
from metagen.sandbox.unit_tests import CodeVerdict, call_functions, grade_program
from metagen.sandbox.unsafe_local import UnsafeLocalExecutor

__all__ = [
    "BACKENDS", "ENV_ALLOW", "STATUSES", "BubblewrapExecutor", "CodeVerdict", "ExecResult",
    "Executor", "Limits", "Preflight", "Status", "TestOutcome", "UnsafeLocalExecutor",
    "call_functions", "check_code_execution", "code_execution_allowed", "default_executor",
    "grade_program", "preflight", "require_code_execution_allowed", "run", "run_function",
    "run_tests"]


def run(program: str, *, stdin: str | None = None,
        files: Mapping[str, str | bytes] | None = None, limits: Limits = Limits(),
        allow_code_execution: bool | None = None, backend: str | None = None) -> ExecResult:
    """Run ``program`` with :func:`default_executor` (see :class:`Executor` for the contract)."""
    executor = default_executor(allow_code_execution=allow_code_execution, backend=backend)
    return executor.run(program, stdin=stdin, files=files, limits=limits)
