"""Execution-agreement utility for MBR over programs (Shi et al. 2022, "Natural Language to Code
Translation with Execution"; Li et al. 2022, AlphaCode clustering).

Two candidate programs agree on an input when both run and return the same JSON-serialisable
value; ``u(i, j)`` is the fraction of the user's inputs on which they agree.

**This executes model-written code.** Each distinct program runs once, in a fresh
``python -I`` subprocess of its own (new session, stdin closed, stdout/stderr discarded, CPU and
file-size rlimits, the whole process group killed at the wall-clock timeout). That is NOT a
sandbox: the code can read and write what this user can. Pass ``executor=`` (a
:class:`metagen.sandbox.Executor`, e.g. bubblewrap) to run each program in a sandbox instead. It is therefore refused unless the
caller opts in with ``allow_code_execution=True`` (RELIABILITY E21), which is checked when the
utility is constructed — before any model call. Results are compared in this (trusted) process
as serialised JSON text, so an object whose ``__eq__`` is always true cannot fake agreement
(E17), and a run counts only if the runner wrote its result file with the per-run nonce (E16).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.sandbox.executor import Executor
from metagen.sandbox.harness import run_function
from metagen.sandbox.limits import Limits

_RUNNER = r'''
import json, sys
work, entry, nonce = sys.argv[1], sys.argv[2], sys.argv[3]
src = open(work + "/program.py").read()
inputs = json.load(open(work + "/inputs.json"))
outs = []
try:
    ns = {"__name__": "__candidate__"}
    exec(compile(src, "candidate.py", "exec"), ns)
    fn = ns[entry]
except BaseException as exc:
    fn, outs = None, [["load_error", type(exc).__name__]] * len(inputs)
if fn is not None:
    for args in inputs:
        try:
            value = fn(*args)
            try:
                outs.append(["ok", json.dumps(value, sort_keys=True)])
            except BaseException:
                outs.append(["unserializable", type(value).__name__])
        except BaseException as exc:
            outs.append(["error", type(exc).__name__])
with open(work + "/result.json", "w") as f:
    json.dump({"outs": outs, "nonce": nonce}, f)
'''

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text`` (```python ... ```), else the text itself."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


class ExecutionAgreementUtility:
    """``u(i, j)`` = fraction of ``inputs`` where programs i and j return equal values.

    ``inputs`` is a list of argument lists (JSON-serialisable) for the function ``entry_point``.
    ``code`` maps a completion to program text (default :func:`extract_code`). Raises
    ``InvalidParameterError`` naming ``allow_code_execution`` unless it is True. ``executor``: a
    :class:`metagen.sandbox.Executor` to run the programs in (e.g. the one
    :func:`metagen.sandbox.check_code_execution` returns); None keeps the plain subprocess.
    """

    def __init__(self, inputs: Sequence[Sequence[Any]], entry_point: str, *,
                 allow_code_execution: bool = False, timeout: float = 5.0,
                 code: Callable[[str], str] = extract_code,
                 executor: Executor | None = None) -> None:
        if allow_code_execution is not True:
            raise InvalidParameterError(
                "allow_code_execution", allow_code_execution,
                "execution agreement runs model-written code in a plain subprocess (not a "
                "sandbox); pass allow_code_execution=True to opt in (RELIABILITY E21)")
        if not inputs:
            raise InvalidParameterError("inputs", inputs, "need at least one input")
        if not isinstance(entry_point, str) or not entry_point.isidentifier():
            raise InvalidParameterError("entry_point", entry_point, "must be a function name")
        if not isinstance(timeout, (int, float)) or not 0 < timeout <= 600:
            raise InvalidParameterError("timeout", timeout, "must be in (0, 600] seconds")
        self.inputs = [list(args) for args in inputs]
        json.dumps(self.inputs)  # fail early on non-serialisable inputs
        self.entry_point = entry_point
        self.timeout = float(timeout)
        self.code = code
        self.executor = executor
        self.runs = 0  # subprocesses started (for tests and accounting)

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
        self.runs += 1
        if self.executor is not None:
            limits = Limits(wall_seconds=self.timeout, cpu_seconds=self.timeout)
            values, _ = run_function(self.executor, program, self.entry_point, self.inputs,
                                     limits=limits)
            return values
        failed: list[str | None] = [None] * len(self.inputs)
        nonce = secrets.token_hex(16)
        with tempfile.TemporaryDirectory(prefix="metagen_exec_") as work:
            Path(work, "program.py").write_text(program)
            Path(work, "inputs.json").write_text(json.dumps(self.inputs))
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _RUNNER, work, self.entry_point, nonce],
                cwd=work, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=self._limits)
            try:
                proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                return failed
            finally:
                _kill_group(proc)
            try:
                result = json.loads(Path(work, "result.json").read_text())
            except (OSError, ValueError):
                return failed
        if not isinstance(result, dict) or result.get("nonce") != nonce or proc.returncode != 0:
            return failed
        outs = result.get("outs")
        if not isinstance(outs, list) or len(outs) != len(self.inputs):
            return failed
        return [o[1] if isinstance(o, list) and len(o) == 2 and o[0] == "ok" else None
                for o in outs]

    def _limits(self) -> None:  # runs in the child before exec
        import resource
        cpu = int(self.timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
