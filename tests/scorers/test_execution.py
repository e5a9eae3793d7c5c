"""Execution agreement: opt-in, golden agreement, and runs that must not count."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.scorers import ExecutionAgreementUtility

INPUTS = [[1, 2], [3, 4], [-1, 1]]
ADD = "def f(a, b):\n    return a + b\n"
ADD2 = "```python\ndef f(x, y):\n    return y + x\n```"
MUL = "def f(a, b):\n    return a * b\n"
HALF = "def f(a, b):\n    if a < 0:\n        raise ValueError\n    return a + b\n"


def test_refused_without_explicit_opt_in():
    for flag in (False, None, 1, "yes"):
        with pytest.raises(InvalidParameterError, match="allow_code_execution"):
            ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=flag)


def test_agreement_golden_and_programs_run_once_each():
    u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True)
    hyps = [ADD, ADD2, MUL, HALF, ADD]
    m = u.matrix(hyps, hyps)
    assert u.runs == 4  # each distinct program runs once
    assert m[0] == [1, 1, 0, pytest.approx(2 / 3), 1]
    assert m[2][2] == 1 and m[2][0] == 0  # 1*2 != 1+2, 12 != 7, -1 != 0
    assert m[3][3] == pytest.approx(2 / 3)  # a failed input agrees with nothing


def test_failures_never_agree():
    u = ExecutionAgreementUtility([[1, 2]], "f", allow_code_execution=True, timeout=2)
    always_eq = ("class E:\n    def __eq__(self, o):\n        return True\n"
                 "def f(a, b):\n    return E()\n")
    early_exit = "import os\nos._exit(0)\n"
    sleeper = "import time\ndef f(a, b):\n    time.sleep(60)\n"
    syntax = "def f(:\n"
    outs = u.outputs([always_eq, early_exit, sleeper, syntax, ADD])
    assert outs == [[None], [None], [None], [None], ["3"]]


def test_programs_can_run_in_a_sandbox_executor():
    from metagen.sandbox import UnsafeLocalExecutor, preflight, BubblewrapExecutor
    found = preflight()
    executors = [UnsafeLocalExecutor(allow_code_execution=True)]
    if found.backend == "bubblewrap":
        executors.append(BubblewrapExecutor(use_cgroup=found.cgroup, allow_code_execution=True))
    always_eq = ("class E:\n    def __eq__(self, o):\n        return True\n"
                 "def f(a, b):\n    return E()\n")
    for ex in executors:
        u = ExecutionAgreementUtility(INPUTS, "f", allow_code_execution=True, timeout=2,
                                      executor=ex)
        outs = u.outputs([ADD, HALF, always_eq, "import os\nos._exit(0)\n"])
        assert outs == [["3", "7", "0"], ["3", "7", None], [None] * 3, [None] * 3], ex.name
