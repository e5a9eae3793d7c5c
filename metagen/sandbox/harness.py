"""Scoring helpers on top of an executor: pass needs positive evidence, values compare in the
trusted parent.

:func:`run_tests` counts a pass only when the driver printed a per-run nonce *after* the tests
ran and the run ended ``ok``; a program that exits early (``os._exit(0)`` at import) never
passes. :func:`run_function` returns each call's JSON text, compared here, so an object whose
``__eq__`` is always true cannot fake a match. The nonce reaches the driver on stdin and lives
only in a function's local; it proves the driver reached its end, not that adversarial code could
not introspect that frame.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.sandbox.executor import Executor
from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult

_SENTINEL = "METAGEN-TESTS-PASSED "

_TEST_DRIVER = r'''
def _metagen_main():
    import sys
    nonce = sys.stdin.readline().strip()
    ns = {"__name__": "__solution__"}
    exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
    exec(compile(open("tests.py").read(), "tests.py", "exec"), ns)
    sys.stdout.flush()
    sys.__stdout__.write("\n%s" + nonce + "\n")
    sys.__stdout__.flush()
_metagen_main()
''' % _SENTINEL

_CALL_DRIVER = r'''
def _metagen_main():
    import json, sys
    nonce = sys.stdin.readline().strip()
    entry, inputs = json.loads(open("call.json").read())
    ns = {"__name__": "__solution__"}
    exec(compile(open("solution.py").read(), "solution.py", "exec"), ns)
    fn = ns[entry]
    outs = []
    for args in inputs:
        try:
            value = fn(*args)
            if type(value) not in (int, float, str, bool, list, dict, tuple, type(None)):
                raise TypeError("not a primitive value")
            outs.append(json.dumps(value, sort_keys=True))
        except Exception:
            outs.append(None)
    sys.__stdout__.write("\n" + nonce + json.dumps(outs) + "\n")
    sys.__stdout__.flush()
_metagen_main()
'''


@dataclass(frozen=True)
class TestOutcome:
    """``passed`` is True only on positive evidence; ``result`` is the raw run. ``scored`` is
    False for a ``sandbox_error`` (the program's behaviour is unknown: do not count it)."""

    __test__ = False  # not a pytest class
    passed: bool
    result: ExecResult

    @property
    def scored(self) -> bool:
        return self.result.status != "sandbox_error"


def run_tests(executor: Executor, program: str, test_code: str, *,
              limits: Limits = Limits()) -> TestOutcome:
    """Run ``program`` then ``test_code`` (asserts) in one namespace inside ``executor``."""
    for name, value in (("program", program), ("test_code", test_code)):
        if not isinstance(value, str):
            raise InvalidParameterError(name, value, "must be source text (str)")
    nonce = secrets.token_hex(16)
    res = executor.run(_TEST_DRIVER, stdin=nonce + "\n", limits=limits,
                       files={"solution.py": program, "tests.py": test_code})
    lines = res.stdout.rstrip("\n").split("\n")
    passed = res.status == "ok" and not res.stdout_truncated and lines[-1] == _SENTINEL + nonce
    return TestOutcome(passed, res)


def run_function(executor: Executor, program: str, entry_point: str,
                 inputs: list[list[Any]], *, limits: Limits = Limits()
                 ) -> tuple[list[str | None], ExecResult]:
    """Call ``entry_point(*args)`` for each of ``inputs``; per input the JSON text of a
    primitive return value, or None (error, non-primitive value, or the run failed)."""
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise InvalidParameterError("entry_point", entry_point, "must be a function name")
    nonce = secrets.token_hex(16)
    res = executor.run(_CALL_DRIVER, stdin=nonce + "\n", limits=limits, files={
        "solution.py": program, "call.json": json.dumps([entry_point, inputs])})
    failed: list[str | None] = [None] * len(inputs)
    last = res.stdout.rstrip("\n").split("\n")[-1]
    if res.status != "ok" or res.stdout_truncated or not last.startswith(nonce):
        return failed, res
    try:
        outs = json.loads(last[len(nonce):])
    except ValueError:
        return failed, res
    if not isinstance(outs, list) or len(outs) != len(inputs):
        return failed, res
    return [o if isinstance(o, str) else None for o in outs], res
