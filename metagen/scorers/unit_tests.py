"""Unit-test verifier: a reward model that runs each completion's program on its problem's tests.

:class:`UnitTestVerifier` scores 1.0 when the program passes every test of its
:class:`~metagen.sandbox.code_problem.CodeProblem` and 0.0 when it fails one (a wrong answer, an
exception, a syntax error or a timeout all fail). **This executes model-written code** in a
sandbox, graded by :func:`metagen.sandbox.code_problem.grade_code` (the tests run in a trusted
test process; the program cannot forge a pass). The opt-in (``allow_code_execution=True`` or
``METAGEN_ALLOW_CODE_EXECUTION=1``) and a working sandbox are checked at construction, before
any model call (E21/E22). A run ending in ``sandbox_error`` is retried under the same policy as
:class:`~metagen.scorers.execution.ExecutionAgreementUtility` and then raises
:class:`~metagen.errors.SandboxUnavailable`: it is never scored 0 (E18).

Note: graded on a problem's *hidden* tests this is an oracle, fine for measuring or for rejection
sampling against known tests, not a fair selector when the same tests grade the result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.generators.base import Prompt
from metagen.sandbox.code_problem import (
    CODE_LIMITS,
    CodeProblem,
    assemble_program,
    grade_code,
    problems_by_prompt,
)
from metagen.sandbox.executor import Executor
from metagen.sandbox.limits import Limits
from metagen.sandbox.retry import retry_sandbox, sandbox_executor
from metagen.scorers.base import check_same_length
from metagen.scorers.usage import UsageMeter
from metagen.types import Usage


class UnitTestVerifier:
    """1.0 if a completion's program passes its problem's tests, else 0.0.

    ``problems``: the code problems, found by prompt (``problem.prompt``), or a mapping
    prompt -> problem where prompts differ from ``problem.prompt`` (e.g. a few-shot prompt). A
    prompt that matches no problem (or a chat prompt) raises :class:`InvalidPromptError` naming
    ``prompts``. ``executor``: the sandbox; None takes :func:`metagen.sandbox.default_executor`
    with ``backend``. Raises at construction: :class:`CodeExecutionNotAllowed` without the
    opt-in, :class:`SandboxUnavailable` when no sandbox works, :class:`InvalidParameterError`
    for empty or duplicate ``problems``, or both ``executor`` and ``backend``.

    ``score`` grades each distinct program once (same assembled text, same problem), up to
    ``workers`` (default ``os.cpu_count()``) in parallel threads (an executor keeps no state
    between runs). ``usage.scorer_calls`` counts programs graded, retries excluded.
    """

    def __init__(self, problems: Sequence[CodeProblem] | Mapping[str, CodeProblem], *,
                 allow_code_execution: bool | None = None, executor: Executor | None = None,
                 backend: str | None = None, limits: Limits = CODE_LIMITS,
                 call_seconds: float = 5.0, workers: int | None = None) -> None:
        self.problems = problems_by_prompt(problems)
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise InvalidParameterError("workers", workers, "must be a positive integer")
        self.executor = sandbox_executor(executor, backend, allow_code_execution)
        self.limits = limits
        self.call_seconds = call_seconds
        self.workers = workers or os.cpu_count() or 1
        self._meter = UsageMeter()

    @property
    def usage(self) -> Usage:
        return self._meter.usage

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        problems = [self._problem(p) for p in prompts]
        keys = [(pb.task_id, assemble_program(pb, c)) for pb, c in zip(problems, completions)]
        distinct: dict[tuple[str, str], tuple[CodeProblem, str]] = {}
        for key, pb, text in zip(keys, problems, completions):
            distinct.setdefault(key, (pb, text))
        with self._meter.timed(), ThreadPoolExecutor(max_workers=self.workers) as pool:
            grades = dict(zip(distinct, pool.map(lambda job: self._grade(*job),
                                                 distinct.values())))
        self._meter.add(0, 0.0, calls=len(distinct))
        return [1.0 if grades[key] else 0.0 for key in keys]

    def _problem(self, prompt: Prompt) -> CodeProblem:
        if not isinstance(prompt, str) or prompt not in self.problems:
            shown = prompt[:80] if isinstance(prompt, str) else "<chat messages>"
            raise InvalidPromptError("prompts", shown, "matches none of the verifier's problems")
        return self.problems[prompt]

    def _grade(self, problem: CodeProblem, completion: str) -> bool:
        def attempt() -> tuple[bool, str | None]:
            verdict = grade_code(self.executor, problem, completion, limits=self.limits,
                                 call_seconds=self.call_seconds)
            return verdict.passed, (None if verdict.scored else verdict.result.detail)
        return retry_sandbox(attempt, self.executor.name)

