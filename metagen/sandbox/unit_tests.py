"""Grading a program with unit tests in two processes, so that a pass cannot be forged.

Inside one sandbox run, a *test process* runs the trusted test code (data-set text) and the
program runs in a *child process* the test process starts; the two speak a strict encoding of
primitive values over pipes (:mod:`metagen.sandbox.grader.wire`). The test code calls the
program's functions through proxies, so every value it compares is a plain ``int``/``str``/...
built in the test process: an object whose ``==`` always answers True cannot cross (E17).
The test process reads a per-run nonce from stdin before the child exists, makes itself
non-dumpable (the child cannot open its ``/proc`` fds, memory or environment), and prints the
verdict with the nonce only after every process the child started is dead. Here, in the trusted
parent, a pass is that verdict line, with the nonce, saying every test passed, on a run that
ended ``ok`` (E16); the program itself never holds the nonce, never writes to the test process's
stdout, and cannot end the run early with a pass. A dead, hung, or garbling child fails the test
that called it, with the reason.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.errors import InvalidParameterError
from metagen.sandbox.executor import Executor
from metagen.sandbox.grader import PACKAGE, shipped_files, wire
from metagen.sandbox.grader.testproc import SENTINEL, SPEC
from metagen.sandbox.limits import Limits
from metagen.sandbox.result import ExecResult

VerdictStatus = Literal["passed", "failed", "timeout", "load_error", "no_verdict",
                        "sandbox_error"]
"""``passed``: every test passed. ``failed``: a test failed (assert, exception, a non-primitive
value, a dead or garbling program). ``timeout``: a call, or the whole run, ran out of time.
``load_error``: the program did not load (syntax error, exception or exit at import).
``no_verdict``: the run ended without a verdict (memory, output limit, crash). ``sandbox_error``:
the sandbox failed; the program's behaviour is unknown and must not be scored."""

_BOOT = f"import sys, os\nsys.path.insert(0, os.getcwd())\n" \
        f"from {PACKAGE}.testproc import main\nsys.exit(main())\n"


@dataclass(frozen=True)
class CodeVerdict:
    """The grade of one program. ``passed`` only on the test process's nonce-bearing verdict.
    ``reason``: the first failure (failing assert line, exception text, timeout), usable as
    feedback; ``outcomes``: per test chunk (or per call) whether it passed; ``values``: per call
    of :func:`call_functions`, the canonical encoding of the value returned, else None;
    ``stderr``: the program's own stderr and prints (truncated); ``result``: the raw run."""

    __test__ = False  # not a pytest class
    passed: bool
    status: VerdictStatus
    reason: str
    result: ExecResult
    outcomes: tuple[bool, ...] = ()
    values: tuple[str | None, ...] = ()
    stderr: str = ""

    @property
    def scored(self) -> bool:
        """False for ``sandbox_error``: unknown, neither a pass nor a fail."""
        return self.status != "sandbox_error"


def grade_program(executor: Executor, program: str, tests: Sequence[str], *,
                  setup: Sequence[str] = (), functions: Sequence[str] | None = None,
                  limits: Limits = Limits(), call_seconds: float = 5.0) -> CodeVerdict:
    """Grade ``program`` (Python source) with ``tests``: each a chunk of test code run in turn
    in the test process, in one namespace that first ran the ``setup`` chunks; a chunk passes
    when it raises nothing. The program's ``functions`` (None: every callable it defines at top
    level) are bound in that namespace as proxies that call into the program's process; loading
    the program and each call must finish within ``call_seconds``; ``limits`` bound the whole
    run (both processes). Raises
    :class:`InvalidParameterError` naming a bad argument, and what ``executor.run`` raises
    (e.g. :class:`~metagen.errors.CodeExecutionNotAllowed`)."""
    _check_sources("tests", tests, nonempty=True)
    _check_sources("setup", setup)
    if functions is not None:
        _check_names("functions", functions)
    return _run(executor, program, {"setup": list(setup), "tests": list(tests),
                                    "proxies": None if functions is None else list(functions),
                                    "calls": []}, limits, call_seconds)


def call_functions(executor: Executor, program: str, calls: Sequence[tuple[str, Sequence[Any]]],
                   *, limits: Limits = Limits(), call_seconds: float = 5.0) -> CodeVerdict:
    """Call ``name(*args)`` in the program's process for each of ``calls``; the verdict's
    ``values`` hold each returned value's canonical encoding (equal text = equal value of the
    same types), None where the call failed or returned a non-primitive value."""
    if not calls:
        raise InvalidParameterError("calls", calls, "need at least one call")
    _check_names("calls", [c[0] for c in calls])
    spec_calls = [(name, tuple(args)) for name, args in calls]
    try:
        wire.dumps(spec_calls)
    except wire.WireError as exc:
        raise InvalidParameterError("calls", calls, f"arguments must be primitive: {exc}") \
            from None
    return _run(executor, program, {"setup": [], "tests": [], "calls": spec_calls,
                                    "proxies": sorted({c[0] for c in calls})}, limits,
                call_seconds)


def _run(executor: Executor, program: str, spec: dict[str, Any], limits: Limits,
         call_seconds: float) -> CodeVerdict:
    if not isinstance(program, str):
        raise InvalidParameterError("program", program, "must be Python source text (str)")
    if isinstance(call_seconds, bool) or not isinstance(call_seconds, (int, float)) \
            or not 0 < call_seconds < math.inf:
        raise InvalidParameterError("call_seconds", call_seconds, "must be a positive number")
    spec["call_seconds"] = float(call_seconds)
    nonce = secrets.token_hex(16)
    files = {**shipped_files(), SPEC: wire.dumps(spec), "solution.py": program}
    res = executor.run(_BOOT, stdin=nonce + "\n", files=files, limits=limits)
    return read_verdict(res, nonce)


def read_verdict(res: ExecResult, nonce: str) -> CodeVerdict:
    """The verdict of run ``res`` whose nonce was ``nonce``: the last stdout line must be the
    test process's verdict with that nonce; anything else is not a pass."""
    if res.status == "sandbox_error":
        return CodeVerdict(False, "sandbox_error", f"the sandbox failed: {res.detail}", res)
    last = res.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    head = SENTINEL + nonce + " "
    doc: Any = None
    if res.status in ("ok", "error") and not res.stdout_truncated and last.startswith(head):
        try:
            doc = wire.loads(last[len(head):])
        except wire.WireError:
            doc = None
    if not _well_formed(doc):
        why = {"ok": "exited without a verdict", "error": "failed without a verdict"}.get(
            res.status, f"ended with status {res.status}")
        status: VerdictStatus = "timeout" if res.status == "timeout" else "no_verdict"
        return CodeVerdict(False, status, f"the test run {why}: {res.stderr[-500:]}".strip(),
                           res)
    kind = doc["kind"]
    passed = not kind and res.status == "ok"
    verdict_status: VerdictStatus = "passed" if passed else (
        kind if kind in ("timeout", "load_error") else "failed")
    return CodeVerdict(passed, verdict_status, doc["reason"], res, tuple(doc["outcomes"]),
                       tuple(doc["values"]), doc["stderr"])


def _well_formed(doc: Any) -> bool:
    return (type(doc) is dict and type(doc.get("kind")) is str
            and type(doc.get("reason")) is str and type(doc.get("stderr")) is str
            and type(doc.get("outcomes")) is list
            and all(type(o) is bool for o in doc["outcomes"])
            and type(doc.get("values")) is list
            and all(v is None or type(v) is str for v in doc["values"]))


def _check_sources(name: str, chunks: Sequence[str], *, nonempty: bool = False) -> None:
    if isinstance(chunks, str) or not all(isinstance(c, str) for c in chunks):
        raise InvalidParameterError(name, chunks, "must be a sequence of source texts (str)")
    if nonempty and not chunks:
        raise InvalidParameterError(name, chunks, "need at least one test")


def _check_names(name: str, names: Sequence[str]) -> None:
    if isinstance(names, str) or not all(isinstance(n, str) and n.isidentifier()
                                         for n in names):
        raise InvalidParameterError(name, names, "must name functions (identifiers)")
