"""The short forms of :mod:`metagen.sandbox.unit_tests` that scorers and benchmarks call.

:func:`run_tests` grades a program with one chunk of asserts; :func:`run_function` returns
each call's value as JSON text (keys sorted), for comparison here in the trusted parent. Both
run the program in its own process behind the test process (see
:mod:`metagen.sandbox.unit_tests`), so neither a pass nor a value can be forged by
introspecting or ending the grading code.
"""

from __future__ import annotations

import json
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.sandbox.executor import Executor
from metagen.sandbox.grader import wire
from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult
from metagen.sandbox.unit_tests import CodeVerdict, call_functions, grade_program

TestOutcome = CodeVerdict
"""The former name of :class:`CodeVerdict` (``passed``, ``result``, ``scored``)."""


def run_tests(executor: Executor, program: str, test_code: str, *,
              limits: Limits = Limits()) -> CodeVerdict:
    """Grade ``program`` with ``test_code`` (asserts that may use every function it defines);
    each call may take the whole ``limits.wall_seconds``."""
    if not isinstance(test_code, str):
        raise InvalidParameterError("test_code", test_code, "must be source text (str)")
    return grade_program(executor, program, [test_code], limits=limits,
                         call_seconds=limits.wall_seconds)


def run_function(executor: Executor, program: str, entry_point: str,
                 inputs: list[list[Any]], *, limits: Limits = Limits()
                 ) -> tuple[list[str | None], ExecResult]:
    """Call ``entry_point(*args)`` for each of ``inputs``; per input the JSON text (keys sorted)
    of a returned ``int``/``float``/``str``/``bool``/``None``/``list``/``tuple``/``dict`` that
    JSON can hold, else None (error, other value, or the run failed). For exact typed values
    (tuples apart from lists, sets) use :func:`~metagen.sandbox.unit_tests.call_functions`."""
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise InvalidParameterError("entry_point", entry_point, "must be a function name")
    verdict = call_functions(executor, program, [(entry_point, args) for args in inputs],
                             limits=limits, call_seconds=limits.wall_seconds)
    if len(verdict.values) != len(inputs):
        return [None] * len(inputs), verdict.result
    return [None if v is None else _json_text(wire.loads(v)) for v in verdict.values], \
        verdict.result


def _json_text(value: Any) -> str | None:
    if type(value) not in (int, float, str, bool, list, dict, tuple, type(None)):
        return None
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):  # e.g. a set inside, or keys of mixed types
        return None
