"""Code-generation problems graded by unit tests in the sandbox (HumanEval, MBPP).

A :class:`CodeProblem` holds what the model sees and what grades it. :func:`assemble_program`
turns a completion into the program; :func:`grade_code` runs the problem's tests against it with
:func:`metagen.sandbox.unit_tests.grade_program`: the tests, the ``setup`` code and the
comparisons run in a trusted test process, the program in its own process behind a proxy for
``entry_point``, so a program can fail its tests but never forge a pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metagen.errors import InvalidParameterError
from metagen.sandbox.executor import Executor
from metagen.sandbox.limits import Limits
from metagen.sandbox.unit_tests import CodeVerdict, grade_program

#: Default limits of one grading run (the test process and the program together).
CODE_LIMITS = Limits(wall_seconds=20.0, cpu_seconds=10.0)

_FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(text: str) -> str:
    """The first fenced code block of ``text`` (```python ... ```), else the text itself."""
    match = _FENCE.search(text)
    return match.group(1) if match else text


@dataclass(slots=True, frozen=True)
class CodeProblem:
    """One code problem.

    ``prompt``: the text the model continues. ``entry_point``: the function the tests call.
    ``tests``: test chunks run in turn in the test process (each passes or fails on its own).
    ``setup``: trusted data-set code run first in the test process (HumanEval: the prompt, for
    its helper functions; MBPP: ``test_setup_code``). ``prefix``: prepended to a completion to
    make the program (HumanEval: the prompt). ``end_marker``: a completion is cut at its first
    occurrence (MBPP: ``[DONE]``). ``reference``: a reference program (the data set's solution).
    ``description``: the natural-language task, where the data set has one. ``shots``: the
    few-shot examples ``prompt`` shows, as (task, solution) pairs (MBPP), for the task's chat
    form to give as user/assistant turns.
    """

    task_id: str
    prompt: str
    entry_point: str
    tests: tuple[str, ...]
    setup: tuple[str, ...] = ()
    prefix: str = ""
    end_marker: str = ""
    reference: str = ""
    description: str = ""
    shots: tuple[tuple[str, str], ...] = ()


def assemble_program(problem: CodeProblem, completion: str) -> str:
    """The program a completion stands for: cut at ``end_marker``, the first fenced code block
    (else the text), then ``prefix`` + that code — or, when the code itself defines
    ``entry_point`` at top level (a completion that repeats the signature), ``prefix``, a
    newline, and the code, whose definition then replaces the prefix's stub."""
    if problem.end_marker and problem.end_marker in completion:
        completion = completion[:completion.index(problem.end_marker)]
    code = extract_code(completion)
    if problem.prefix and _defines(code, problem.entry_point):
        return problem.prefix + "\n" + code
    return problem.prefix + code


def grade_code(executor: Executor, problem: CodeProblem, completion: str, *,
               limits: Limits = CODE_LIMITS, call_seconds: float = 5.0) -> CodeVerdict:
    """Grade ``completion`` on ``problem``'s tests in ``executor`` (see
    :func:`~metagen.sandbox.unit_tests.grade_program` for the verdict, its ``reason`` usable as
    feedback, and what raises)."""
    return grade_program(executor, assemble_program(problem, completion), problem.tests,
                         setup=problem.setup, functions=(problem.entry_point,), limits=limits,
                         call_seconds=call_seconds)


def problems_by_prompt(problems: Sequence[CodeProblem] | Mapping[str, CodeProblem]
               ) -> dict[str, CodeProblem]:
    """``problems`` keyed by the prompt the model sees: a mapping as given, or each problem by
    its ``prompt``. ``InvalidParameterError`` naming ``problems`` when empty or when two
    problems share a prompt."""
    if isinstance(problems, Mapping):
        table = dict(problems)
    else:
        table = {}
        for problem in problems:
            if problem.prompt in table:
                raise InvalidParameterError("problems", problem.task_id,
                                            "two problems share one prompt")
            table[problem.prompt] = problem
    if not table:
        raise InvalidParameterError("problems", problems, "need at least one problem")
    return table


def _defines(code: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.MULTILINE) \
        is not None
