"""The explicit opt-in that running model-written code needs."""

from __future__ import annotations

import os

from metagen.errors import CodeExecutionNotAllowed

ENV_ALLOW = "METAGEN_ALLOW_CODE_EXECUTION"


def code_execution_allowed(allow_code_execution: bool | None = None) -> bool:
    """True when the caller opted in: ``allow_code_execution is True``, or it is None and the
    environment variable ``METAGEN_ALLOW_CODE_EXECUTION`` is ``1``. ``False`` always refuses."""
    if allow_code_execution is None:
        return os.environ.get(ENV_ALLOW, "") == "1"
    return allow_code_execution is True


def require_code_execution_allowed(allow_code_execution: bool | None = None) -> None:
    """Raise :class:`CodeExecutionNotAllowed` unless :func:`code_execution_allowed`."""
    if not code_execution_allowed(allow_code_execution):
        raise CodeExecutionNotAllowed(
            "running model-written code needs an explicit opt-in: pass "
            f"allow_code_execution=True or set {ENV_ALLOW}=1 "
            f"(got allow_code_execution={allow_code_execution!r})")
