"""Execution agreement: the opt-in and the sandbox checked at construction, golden agreement in
the default sandbox, runs that must not count, and sandbox failures that must not be scored."""

from __future__ import annotations

import importlib

import pytest

from metagen.errors import CodeExecutionNotAllowed, InvalidParameterError, SandboxUnavailable
from metagen.sandbox import ENV_ALLOW, ExecResult, Limits, UnsafeLocalExecutor
from metagen.scorers import ExecutionAgreementUtility
from metagen.scorers.execution import ATTEMPTS

INPUTS = [[1, 2], [3, 4], [-1, 1]]
ADD = "def f(a, b):\n    return a + b\n"
ADD2 = "```python\ndef f(x, y):\n    return y + x\n```"
MUL = "def f(a, b):\n    return a * b\n"
HALF = "def f(a, b):\n    if a < 0:\n        raise ValueError\n    return a + b\n"
ALWAYS_EQ = ("class E:\n    def __eq__(self, o):\n        return True\n"
             "def f(a, b):\n    return E()\n")
EARLY_EXIT = "import os\nos._exit(0)\n"
# The module (the package's ``preflight`` attribute is the function of the same name).
preflight_module = importlib.import_module("metagen.sandbox.preflight")


def test_refused_without_explicit_opt_in_before_anything_runs(monkeypatch):
    monkeypatch.delenv(ENV_ALLOW, raising=False)
    ex = _ScriptedExecutor(failures=0)
    for flag in (False, None, 1, "yes"):
        with pytest.raises(CodeExecutionNotAllowed, match="allow_code_execution"):
            ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=flag)
        with pytest.raises(CodeExecutionNotAllowed, match="allow_code_execution"):
            ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=flag, executor=ex)
    monkeypatch.setenv(ENV_ALLOW, "1")
    with pytest.raises(CodeExecutionNotAllowed):  # an explicit False wins over the environment
        ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=False, executor=ex)
    assert ex.calls == 0


def test_environment_opt_in_is_accepted(monkeypatch, default_sandbox):
    monkeypatch.setenv(ENV_ALLOW, "1")
    u = ExecutionAgreementUtility(INPUTS, "f")
    assert u.executor.name == default_sandbox and u.outputs([ADD]) == [["3", "7", "0"]]


def test_bad_parameters_are_named():
    for kwargs, param in (({"inputs": []}, "inputs"), ({"entry_point": "1f"}, "entry_point"),
                          ({"timeout": 0}, "timeout"), ({"timeout": True}, "timeout"),
                          ({"backend": "docker"}, "backend"),
                          ({"backend": "unsafe-local", "executor": _ScriptedExecutor(0)},
                           "backend")):
        args = {"inputs": INPUTS, "entry_point": "f", "allow_code_execution": True, **kwargs}
        with pytest.raises(InvalidParameterError) as err:
            ExecutionAgreementUtility(**args)
        assert err.value.param == param


def test_no_sandbox_refuses_unless_unsafe_local_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(preflight_module, "_CACHE", {})  # a fresh capability check
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap binary to be found
    monkeypatch.delenv(preflight_module.ENV_BACKEND, raising=False)
    with pytest.raises(SandboxUnavailable, match="bubblewrap") as err:
        ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True)
    assert any("not found" in r for r in err.value.reasons)
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True, backend="unsafe-local")
    assert u.executor.name == "unsafe-local" and u.outputs([ADD]) == [["3", "7", "0"]]


def test_agreement_golden_and_programs_run_once_each(default_sandbox):
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True)
    assert u.executor.name == default_sandbox
    hyps = [ADD, ADD2, MUL, HALF, ADD]
    m = u.matrix(hyps, hyps)
    assert u.runs == 4  # each distinct program runs once
    assert m[0] == [1, 1, 0, pytest.approx(2 / 3), 1]
    assert m[2][2] == 1 and m[2][0] == 0  # 1*2 != 1+2, 12 != 7, -1 != 0
    assert m[3][3] == pytest.approx(2 / 3)  # a failed input agrees with nothing


def test_failures_never_agree(default_sandbox):
    u = ExecutionAgreementUtility([[1, 2]], "f", allow_code_execution=True, timeout=2)
    sleeper = "import time\ndef f(a, b):\n    time.sleep(60)\n"
    syntax = "def f(:\n"
    a_set = "def f(a, b):\n    return {a, b}\n"  # not a primitive value
    outs = u.outputs([ALWAYS_EQ, EARLY_EXIT, sleeper, syntax, a_set, ADD])
    assert outs == [[None], [None], [None], [None], [None], ["3"]]
    assert u.matrix([ALWAYS_EQ], [ALWAYS_EQ]) == [[0.0]]


@pytest.mark.parametrize("backend", [None, "unsafe-local"])
def test_backends_give_the_same_outputs(backend, request):
    name = backend or request.getfixturevalue("default_sandbox")
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True, timeout=2,
                                  backend=backend)
    assert u.executor.name == name
    outs = u.outputs([ADD, HALF, ALWAYS_EQ, EARLY_EXIT])
    assert outs == [["3", "7", "0"], ["3", "7", None], [None] * 3, [None] * 3]


class _ScriptedExecutor:
    """Reports ``sandbox_error`` for its first ``failures`` runs, then runs the program with the
    unsafe-local backend (the programs of these tests are the trusted ones above)."""

    name = "scripted"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0
        self.real = UnsafeLocalExecutor(allow_code_execution=True)

    def run(self, program, *, stdin=None, files=None, limits=Limits()):
        self.calls += 1
        if self.calls <= self.failures:
            return ExecResult("sandbox_error", None, None, "", "", False, False, 0.0, 0.0,
                              self.name, "scripted: could not spawn")
        return self.real.run(program, stdin=stdin, files=files, limits=limits)


def test_scripted_sandbox_errors_are_retried_not_scored():
    ex = _ScriptedExecutor(failures=ATTEMPTS - 1)
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True, executor=ex)
    assert u.outputs([ADD]) == [["3", "7", "0"]] and u.runs == ATTEMPTS


def test_scripted_persistent_sandbox_error_raises_instead_of_scoring():
    ex = _ScriptedExecutor(failures=10 * ATTEMPTS)
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True, executor=ex)
    with pytest.raises(SandboxUnavailable, match="could not spawn"):
        u.matrix([ADD, MUL], [ADD])
    assert ex.calls == ATTEMPTS
