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
from collections.abc import Callable, Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.sandbox.code_problem import extract_code
from metagen.sandbox.executor import Executor
from metagen.sandbox.harness import run_function
from metagen.sandbox.limits import Limits
from metagen.sandbox.retry import (  # noqa: F401 (re-exported: code scorers import them here)
    ATTEMPTS,
    retry_sandbox,
    sandbox_executor,
)


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
