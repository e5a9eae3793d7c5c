"""Execution-agreement utility for MBR over programs (Shi et al. 2022, "Natural Language to Code
Translation with Execution"; Li et al. 2022, AlphaCode clustering).

Two candidate programs agree on an input when both run and return the same primitive value;
``u(i, j)`` is the fraction of the user's inputs on which they agree.

**This executes model-written code**, each distinct program once, in a sandbox: by default the
executor :func:`metagen.sandbox.default_executor` picks (bubblewrap: no network, no host files,
an unprivileged uid, per-run memory and process limits where cgroups are writable). Where no
sandbox works the constructor raises :class:`~metagen.errors.SandboxUnavailable`; nothing falls
back to unsandboxed execution unless the caller names ``backend="unsafe-local"`` (or passes such
an executor). Without the caller's opt-in (``allow_code_execution=True`` or
``METAGEN_ALLOW_CODE_EXECUTION=1``) the constructor raises
:class:`~metagen.errors.CodeExecutionNotAllowed` (an explicit opt-in and a capability preflight). Both checks happen when
the utility is constructed, before any model call. Values are compared in this (trusted) process
as serialised JSON text, so an object whose ``__eq__`` is always true cannot fake agreement
(E17), and a run counts only on the harness's per-run nonce (E16). A failure of the sandbox
itself is retried and never scored as disagreement (E18).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from metagen.errors import InvalidParameterError, SandboxUnavailable
from metagen.sandbox.executor import Executor
from metagen.sandbox.harness import run_function
from metagen.sandbox.limits import Limits
from metagen.sandbox.optin import require_code_execution_allowed
from metagen.sandbox.preflight import default_executor

ATTEMPTS = 3  # runs of one program that may end in ``sandbox_error`` before giving up

T = TypeVar("T")

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text`` (```python ... ```), else the text itself."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


class ExecutionAgreementUtility:
    """``u(i, j)`` = fraction of ``inputs`` where programs i and j return equal values.

    ``inputs`` is a list of argument lists (JSON-serialisable) for the function ``entry_point``.
    ``code`` maps a completion to program text (default :func:`extract_code`). A program that
    fails to load, raises, times out (``timeout`` seconds of wall and of CPU time per program)
    or returns a non-primitive value agrees with nothing on that input.

    ``executor``: the :class:`metagen.sandbox.Executor` to run programs in; None (default) takes
    :func:`metagen.sandbox.default_executor` with ``backend`` (None = bubblewrap when its
    preflight passes). Raises, at construction: :class:`CodeExecutionNotAllowed` without the
    opt-in, :class:`SandboxUnavailable` when no sandbox works, ``InvalidParameterError`` for
    bad ``inputs``/``entry_point``/``timeout``/``backend``. Scoring raises
    :class:`SandboxUnavailable` when a program's run ends in ``sandbox_error`` :data:`ATTEMPTS`
    times in a row (the program's behaviour is unknown, so it is not scored).
    """

    def __init__(self, inputs: Sequence[Sequence[Any]], entry_point: str, *,
                 allow_code_execution: bool | None = None, timeout: float = 5.0,
                 code: Callable[[str], str] = extract_code,
                 executor: Executor | None = None, backend: str | None = None) -> None:
        if not inputs:
            raise InvalidParameterError("inputs", inputs, "need at least one input")
        if not isinstance(entry_point, str) or not entry_point.isidentifier():
            raise InvalidParameterError("entry_point", entry_point, "must be a function name")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
                or not 0 < timeout <= 600:
            raise InvalidParameterError("timeout", timeout, "must be in (0, 600] seconds")
        self.inputs = [list(args) for args in inputs]
        json.dumps(self.inputs)  # fail early on non-serialisable inputs
        self.executor = sandbox_executor(executor, backend, allow_code_execution)
        self.entry_point = entry_point
        self.timeout = float(timeout)
        self.limits = Limits(wall_seconds=self.timeout, cpu_seconds=self.timeout)
        self.code = code
        self.runs = 0  # sandboxed runs started, retries included (for tests and accounting)

    def outputs(self, texts: Sequence[str]) -> list[list[str | None]]:
        """Per text, per input: the serialised return value, or None when it failed."""
        cache: dict[str, list[str | None]] = {}
        out = []
        for text in texts:
            program = self.code(text)
            if program not in cache:
                cache[program] = self._run(program)
            out.append(cache[program])
        return out

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        outs = self.outputs(list(hyps) + list(refs))
        ho, ro = outs[:len(hyps)], outs[len(hyps):]
        k = len(self.inputs)
        return [[sum(a is not None and a == b for a, b in zip(h, r)) / k for r in ro]
                for h in ho]

    def _run(self, program: str) -> list[str | None]:
        def attempt() -> tuple[list[str | None], str | None]:
            self.runs += 1
            values, res = run_function(self.executor, program, self.entry_point, self.inputs,
                                       limits=self.limits)
            return values, (res.detail if res.status == "sandbox_error" else None)
        return retry_sandbox(attempt, self.executor.name)


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
