"""Acquiring a sandbox for a code scorer or grader, and the one retry policy for its runs.

:func:`sandbox_executor` checks the opt-in and that a sandbox works, before any model call;
:func:`retry_sandbox` reruns a run that ended in ``sandbox_error`` up to :data:`ATTEMPTS` times
and then raises :class:`~metagen.errors.SandboxUnavailable`: a program whose run the sandbox
itself broke is never scored as a failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from metagen.errors import InvalidParameterError, SandboxUnavailable
from metagen.sandbox.executor import Executor
from metagen.sandbox.optin import require_code_execution_allowed
from metagen.sandbox.preflight import default_executor

ATTEMPTS = 3  # runs of one program that may end in ``sandbox_error`` before giving up

T = TypeVar("T")


def sandbox_executor(executor: Executor | None, backend: str | None,
                     allow_code_execution: bool | None) -> Executor:
    """The executor a code scorer runs in, checked before any model call: ``executor`` when
    given (after the opt-in check), else :func:`metagen.sandbox.default_executor` with
    ``backend``. Raises :class:`CodeExecutionNotAllowed` without the opt-in,
    :class:`SandboxUnavailable` when no sandbox works, ``InvalidParameterError`` naming
    ``backend`` when both are given."""
    if executor is not None and backend is not None:
        raise InvalidParameterError("backend", backend,
                                    "give an executor or a backend name, not both")
    if executor is None:
        return default_executor(allow_code_execution=allow_code_execution, backend=backend)
    require_code_execution_allowed(allow_code_execution)
    return executor


def retry_sandbox(attempt: Callable[[], tuple[T, str | None]], sandbox: str) -> T:
    """The one retry policy for a run of model-written code: ``attempt()`` returns its value and
    None, or the detail of a ``sandbox_error``; it is tried up to :data:`ATTEMPTS` times, then
    :class:`SandboxUnavailable` is raised (the program's behaviour is unknown, so it is never
    scored as a failure). ``sandbox`` names the executor in the message."""
    detail = ""
    for _ in range(ATTEMPTS):
        value, error = attempt()
        if error is None:
            return value
        detail = error
    raise SandboxUnavailable(
        f"the {sandbox} sandbox failed {ATTEMPTS} times running one program "
        f"(its behaviour is unknown, so it is not scored): {detail[-300:]}", (detail,))
