"""Execution feedback for self-debugging (Chen et al. 2023, "Teaching Large Language Models to
Self-Debug"): the feedback source :func:`metagen.strategies.refine.refine_with_feedback` takes,
running each attempt on its problem's *visible* tests in the sandbox.

Which tests are visible: by default a problem's ``tests``. For MBPP these are exactly the asserts
the prompt shows ("Your code should pass these tests"), so nothing hidden leaks. For HumanEval
the model sees only the docstring examples, while ``tests`` is the hidden ``check`` function:
the feedback then carries only the first failure's *reason* (the failing assert line or the
exception) and the program's trimmed stderr, which does leak that one hidden assert. Pass
``visible_tests`` (problem -> test chunks, e.g. asserts built from the docstring examples) for a
run where no hidden test may leak.

**This executes model-written code**: the opt-in and the sandbox are checked when the feedback
source is built, before any model call; a ``sandbox_error`` is retried under the policy of
:func:`metagen.sandbox.retry.retry_sandbox` and then raises (never reported as a failure).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from metagen.errors import InvalidPromptError
from metagen.feedback import Feedback, FeedbackFn
from metagen.generators.base import Prompt
from metagen.sandbox.code_problem import CODE_LIMITS, CodeProblem, grade_code, problems_by_prompt
from metagen.sandbox.executor import Executor
from metagen.sandbox.retry import retry_sandbox, sandbox_executor
from metagen.sandbox.unit_tests import CodeVerdict

STDERR_CHARS = 500  # the tail of the program's stderr put into a feedback message


def execution_feedback(problems: Sequence[CodeProblem] | Mapping[str, CodeProblem], *,
                       visible_tests: Callable[[CodeProblem], Sequence[str]] | None = None,
                       allow_code_execution: bool | None = None,
                       executor: Executor | None = None, backend: str | None = None,
                       call_seconds: float = 5.0) -> FeedbackFn:
    """A :data:`FeedbackFn`: ``feedback(prompt, attempt)`` grades ``attempt`` on the visible
    tests of the problem whose prompt it is (see :func:`problems_by_prompt`):
    ``Feedback(ok=passed, message=reason + trimmed stderr, score=1.0 or 0.0)``; a passing
    attempt's message is empty. Raises at construction what
    :func:`metagen.sandbox.retry.sandbox_executor` raises; per call,
    :class:`InvalidPromptError` naming ``prompts`` for a prompt of no problem and
    :class:`SandboxUnavailable` after repeated sandbox failures."""
    table = problems_by_prompt(problems)
    sandbox = sandbox_executor(executor, backend, allow_code_execution)

    def feedback(prompt: Prompt, attempt: str) -> Feedback:
        if not isinstance(prompt, str) or prompt not in table:
            shown = prompt[:80] if isinstance(prompt, str) else "<chat messages>"
            raise InvalidPromptError("prompts", shown, "matches none of the feedback's problems")
        problem = table[prompt]
        if visible_tests is not None:
            problem = replace(problem, tests=tuple(visible_tests(problem)))

        def grade() -> tuple[CodeVerdict, str | None]:
            verdict = grade_code(sandbox, problem, attempt, limits=CODE_LIMITS,
                                 call_seconds=call_seconds)
            return verdict, (None if verdict.scored else verdict.result.detail)
        verdict = retry_sandbox(grade, sandbox.name)
        return Feedback(ok=verdict.passed, message="" if verdict.passed else message(verdict),
                        score=1.0 if verdict.passed else 0.0)
    return feedback


def message(verdict: CodeVerdict) -> str:
    """The feedback text of a failed verdict: its reason, then the tail of the program's
    stderr (prints and tracebacks), when it has any."""
    stderr = verdict.stderr.strip()
    if not stderr:
        return verdict.reason
    return f"{verdict.reason}\nstderr:\n{stderr[-STDERR_CHARS:]}"
