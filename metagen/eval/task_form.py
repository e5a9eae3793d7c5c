"""A task as one run asks it: in text or chat form, and reading a thinking model's answer.

:func:`task_form` is what the runner (and each Ray worker) applies to the registry's
:class:`~metagen.eval.tasks.TaskSpec` before reading items: the items' prompts take the run's
``prompt_format``; with a ``think_end_token`` the grader and the answer key read only what
follows the completion's thinking (:func:`~metagen.tasks.thinking.answer_after_thinking`): a
completion that never closes its thinking has no answer (grades False, abstains from votes).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.eval.tasks import CHAT, PROMPT_FORMATS, TEXT, TaskSpec
from metagen.feedback import FeedbackFn
from metagen.tasks.thinking import answer_after_thinking, check_end_token


def check_prompt_format(value: object) -> str:
    """``value`` when it is ``text`` or ``chat``, else ``InvalidParameterError`` naming
    ``prompt_format``."""
    if value not in PROMPT_FORMATS:
        raise InvalidParameterError("prompt_format", value,
                                    f"must be one of {', '.join(PROMPT_FORMATS)}")
    return str(value)


def task_form(task: TaskSpec, prompt_format: str = TEXT,
              think_end_token: str | None = None) -> TaskSpec:
    """``task`` in ``prompt_format`` (``text`` or ``chat``), its grading and answer key reading
    only the answer after ``think_end_token`` when one is given. Applying the same form again
    returns the task unchanged; another form on a task already formed is refused (the graders
    would strip twice). ``InvalidParameterError`` naming ``prompt_format`` for an unknown
    format or a task without a chat form, ``think_end_token`` for an empty token."""
    check_prompt_format(prompt_format)
    if think_end_token is not None:
        check_end_token(think_end_token)
    if task.prompt_format == prompt_format and task.think_end_token == think_end_token:
        return task
    if task.prompt_format != TEXT or task.think_end_token is not None:
        raise InvalidParameterError("prompt_format", prompt_format,
                                    f"task {task.name} is already in {task.prompt_format} "
                                    "form; form the registry's task")
    if prompt_format == CHAT and task.chat is None:
        raise InvalidParameterError("prompt_format", prompt_format,
                                    f"task {task.name} has no chat form")
    formed = replace(task, prompt_format=prompt_format)
    if prompt_format == CHAT and task.feedback is not None:
        formed = replace(formed, feedback=_item_feedback(task.feedback))
    if think_end_token is None:
        return formed
    return replace(formed, think_end_token=think_end_token,
                   grade=_after_thinking_grade(task.grade, think_end_token),
                   answer_key=_after_thinking_key(task.answer_key, think_end_token))


def _after_thinking_grade(grade: Callable[[str, Any], bool], end: str
                          ) -> Callable[[str, Any], bool]:
    def graded(text: str, problem: Any) -> bool:
        answer = answer_after_thinking(text, end)
        return answer is not None and bool(grade(answer, problem))
    return graded


def _after_thinking_key(key: AnswerKey | None, end: str) -> AnswerKey | None:
    if key is None:
        return None

    def extract(text: str) -> Any:
        answer = answer_after_thinking(text, end)
        return None if answer is None else key.extract(answer)
    return replace(key, name=f"{key.name}+after{end}", extract=extract)


def _item_feedback(feedback: Callable[[Any], FeedbackFn]) -> Callable[[Any], FeedbackFn]:
    """One item's feedback source in chat form: the item's feedback (keyed by its text prompt,
    ``problem.prompt``) whatever conversation the strategy passes."""
    def for_item(problem: Any) -> FeedbackFn:
        inner = feedback(problem)
        return lambda prompt, attempt: inner(problem.prompt, attempt)
    return for_item
