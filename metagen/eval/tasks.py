"""The tasks ``metagen eval`` runs: one :class:`TaskSpec` entry per benchmark.

A task knows its data (a JSONL file given by path, or the testbed's seeded generator), its
prompt in text form (a base model's prompt) and in chat form (a
:class:`~metagen.tasks.chat_format.ChatFormat`: messages for an instruct model's chat
template), its grader and the answer key voting uses. Which form a run uses, and whether its
completions think first, is :func:`~metagen.eval.task_form.task_form`. Nothing is downloaded.
Adding a task is one entry in :data:`TASKS`; a task that executes model-written code
(humaneval, mbpp) also sets ``executor_limits``, so they join the run key, and a
``preflight`` that checks the opt-in and the sandbox before any model is loaded.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.feedback import FeedbackFn
from metagen.generators.base import Prompt
from metagen.tasks.chat_format import ChatFormat

TEXT, CHAT = "text", "chat"
PROMPT_FORMATS = (TEXT, CHAT)


@dataclass(slots=True, frozen=True)
class EvalItem:
    """One item as the runner sees it: a stable ``id`` (the store's key), the prompt (text, or
    chat messages in a task's chat form), the task's own problem object (handed back to the
    grader) and an optional difficulty label."""

    id: str
    prompt: Prompt
    problem: Any
    difficulty: str | None = None


@dataclass(slots=True, frozen=True)
class TaskSpec:
    """How to load, prompt and grade one benchmark.

    ``load(path, limit)`` returns the task's problems (``path`` None only when ``needs_data`` is
    False); ``format_prompt(problem)`` the prompt; ``grade(text, problem)`` whether a completion
    is right; ``item_id(problem)`` a stable id; ``data_fingerprint(path)`` a hash of the data the
    items come from (for the run key). ``preflight()`` raises what would stop grading (a code
    task: no opt-in to code execution, no working sandbox); the runner calls it before loading
    any model. ``feedback(problem)``, for a task that has one, is the feedback source on one
    item (:data:`~metagen.feedback.FeedbackFn`) the strategies needing ``feedback`` read (the
    code tasks: the item's unit tests run in the sandbox); None: those strategies are refused
    on the task. ``chat`` is the task's chat form; ``prompt_format`` which form its items take
    (``text``: ``format_prompt``; ``chat``: ``chat.messages``); ``think_end_token``, when set,
    says ``grade`` and ``answer_key`` read only what follows the completion's thinking
    (both set by :func:`~metagen.eval.task_form.task_form`, never by hand)."""

    name: str
    load: Callable[[Path | None, int | None], Sequence[Any]]
    format_prompt: Callable[[Any], str]
    grade: Callable[[str, Any], bool]
    answer_key: AnswerKey | None
    needs_data: bool = True
    item_id: Callable[[Any], str] = lambda p: str(p.uid)
    difficulty: Callable[[Any], str | None] = lambda p: None
    executor_limits: dict[str, Any] = field(default_factory=dict)
    preflight: Callable[[], None] = lambda: None
    feedback: Callable[[Any], FeedbackFn] | None = None
    chat: ChatFormat | None = None
    prompt_format: str = TEXT
    think_end_token: str | None = None

    def prompt(self, problem: Any) -> Prompt:
        """The prompt of ``problem`` in the task's ``prompt_format``."""
        if self.prompt_format == CHAT:
            assert self.chat is not None  # task_form checked it
            return self.chat.messages(problem)
        return self.format_prompt(problem)

    def items(self, path: str | Path | None, limit: int | None) -> list[EvalItem]:
        """The task's items (at most ``limit``). Raises ``InvalidParameterError`` naming
        ``data`` when the task needs a file and none is given, and on duplicate item ids."""
        problems = self.load(self._data_path(path), limit)
        items = [EvalItem(self.item_id(p), self.prompt(p), p, self.difficulty(p))
                 for p in problems]
        ids = [i.id for i in items]
        if len(set(ids)) != len(ids):
            raise InvalidParameterError("data", str(path), f"task {self.name}: item ids repeat")
        return items

    def data_fingerprint(self, path: str | Path | None) -> str:
        """sha256 of the data file, or of the loader's source for generated data."""
        from metagen.eval.runkey import file_sha256

        data = self._data_path(path)
        if data is not None:
            return file_sha256(data)
        return source_fingerprint(self.load)

    def template_fingerprint(self) -> str:
        """sha256 of the prompt formatter's source: a changed template is a new run key. In
        chat form ``chat:`` and the sha256 of the chat form (its system message and user
        template, the sources of its functions): a text run and a chat run never share a
        key."""
        if self.prompt_format != CHAT:
            return source_fingerprint(self.format_prompt)
        assert self.chat is not None
        text = json.dumps([self.chat.system, self.chat.user, source_fingerprint(self.chat.question),
                           source_fingerprint(self.chat.shots),
                           source_fingerprint(ChatFormat.messages)])
        return "chat:" + hashlib.sha256(text.encode()).hexdigest()

    @property
    def system_prompt(self) -> str | None:
        """The system message the items carry (chat form only; None: none)."""
        return self.chat.system if self.prompt_format == CHAT and self.chat is not None else None

    def _data_path(self, path: str | Path | None) -> Path | None:
        if not self.needs_data:
            if path is not None:
                raise InvalidParameterError("data", str(path),
                                            f"task {self.name} generates its own items")
            return None
        if path is None:
            raise InvalidParameterError("data", None, f"task {self.name} needs --data PATH "
                                        "(its JSONL file; nothing is downloaded)")
        data = Path(path)
        if not data.is_file():
            raise InvalidParameterError("data", str(data), "is not a file")
        return data


def source_fingerprint(fn: Callable[..., Any]) -> str:
    """sha256 of a function's source (its qualified name when the source is unavailable)."""
    target = inspect.unwrap(fn)
    try:
        text = inspect.getsource(target)
    except (OSError, TypeError):
        text = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', target)}"
    return hashlib.sha256(text.encode()).hexdigest()


def _gsm8k() -> TaskSpec:
    from metagen.tasks.gsm8k import (GSM8K_ANSWER_KEY, GSM8K_CHAT, format_gsm8k_prompt,
                                     grade_gsm8k, load_gsm8k)
    return TaskSpec("gsm8k", lambda path, limit: load_gsm8k(_some(path), limit),
                    format_gsm8k_prompt, grade_gsm8k, GSM8K_ANSWER_KEY, chat=GSM8K_CHAT)


def _math500() -> TaskSpec:
    from metagen.tasks.math500 import (MATH_ANSWER_KEY, MATH_CHAT, format_math_prompt,
                                       grade_math, load_math500)
    return TaskSpec("math500", lambda path, limit: load_math500(_some(path), limit),
                    format_math_prompt, grade_math, MATH_ANSWER_KEY,
                    difficulty=lambda p: f"level {p.level}", chat=MATH_CHAT)


TESTBED_POOL = 100_000  # the testbed's held-out split; --limit K takes its first K problems


def load_testbed(path: Path | None, limit: int | None) -> list[Any]:
    """The first ``limit`` (default 100) problems of the testbed's held-out ``test`` split,
    seed 0 (a prefix of the same sequence for every limit)."""
    from metagen import testbed
    return testbed.make_problems("test", min(limit if limit is not None else 100, TESTBED_POOL),
                                 0)


def _testbed() -> TaskSpec:
    from metagen import testbed
    from metagen.tasks.gsm8k import GSM8K_ANSWER_KEY
    return TaskSpec("testbed", load_testbed, testbed.format_prompt,
                    lambda text, p: testbed.grade(text, p.answer), GSM8K_ANSWER_KEY,
                    needs_data=False, difficulty=lambda p: f"d{p.difficulty}",
                    chat=TESTBED_CHAT)


#: The testbed in chat form: the question alone as the user turn (the policy is no instruct
#: model: a chat template made for it renders ``Question: ...\nAnswer:\n`` around it).
TESTBED_CHAT = ChatFormat(lambda p: p.question)


def _code_task(name: str, load: Callable[[Path, int | None], Sequence[Any]],
               chat: ChatFormat) -> TaskSpec:
    """A task graded by unit tests in the default sandbox (:func:`grade_code`, one grading per
    sample, ``sandbox_error`` retried then raised, never scored). The opt-in
    (``METAGEN_ALLOW_CODE_EXECUTION=1``) and the sandbox are checked in ``preflight``. Its
    ``feedback`` is :func:`~metagen.tasks.code_feedback.execution_feedback` on the item's
    ``tests`` (MBPP: the asserts its prompt shows; HumanEval: the hidden ``check``, whose first
    failure's reason then reaches the model: see that module)."""
    from dataclasses import asdict

    from metagen.sandbox.code_problem import CODE_LIMITS, grade_code
    from metagen.sandbox.preflight import default_executor
    from metagen.sandbox.retry import retry_sandbox

    sandbox: list[Any] = []  # the executor, made by preflight (or the first grading)
    call_seconds = 5.0

    def preflight() -> None:
        if not sandbox:
            sandbox.append(default_executor())

    def grade(text: str, problem: Any) -> bool:
        preflight()
        executor = sandbox[0]

        def attempt() -> tuple[bool, str | None]:
            verdict = grade_code(executor, problem, text, limits=CODE_LIMITS,
                                 call_seconds=call_seconds)
            return verdict.passed, None if verdict.scored else verdict.result.detail
        return retry_sandbox(attempt, executor.name)

    def feedback(problem: Any) -> FeedbackFn:
        from metagen.tasks.code_feedback import execution_feedback

        preflight()
        return execution_feedback([problem], executor=sandbox[0], call_seconds=call_seconds)

    return TaskSpec(name, lambda path, limit: load(_some(path), limit),
                    lambda p: str(p.prompt), grade, None, item_id=lambda p: str(p.task_id),
                    executor_limits={**asdict(CODE_LIMITS), "call_seconds": call_seconds},
                    preflight=preflight, feedback=feedback, chat=chat)


def _humaneval() -> TaskSpec:
    from metagen.tasks.humaneval import HUMANEVAL_CHAT, load_humaneval
    return _code_task("humaneval", load_humaneval, HUMANEVAL_CHAT)


def _mbpp(name: str = "mbpp", shots: int = 3) -> TaskSpec:
    from metagen.tasks.mbpp import MBPP_CHAT, load_mbpp
    return _code_task(name, lambda path, limit: load_mbpp(path, limit=limit, shots=shots),
                      MBPP_CHAT)


def _some(path: Path | None) -> Path:
    assert path is not None  # TaskSpec.items checked it
    return path


#: name -> factory of the task (imported on use, so listing tasks loads no data module)
TASKS: dict[str, Callable[[], TaskSpec]] = {
    "gsm8k": _gsm8k,
    "humaneval": _humaneval,
    "math500": _math500,
    "mbpp": _mbpp,
    "mbpp_0shot": lambda: _mbpp("mbpp_0shot", shots=0),
    "testbed": _testbed,
}


def get_task(name: str) -> TaskSpec:
    """The task named ``name``; ``InvalidParameterError`` naming ``task`` lists the known ones."""
    if name not in TASKS:
        raise InvalidParameterError("task", name, f"must be one of {', '.join(sorted(TASKS))}")
    return TASKS[name]()
