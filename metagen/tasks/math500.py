"""MATH-500 (Lightman et al. 2023, the PRM800K test split of Hendrycks et al.'s MATH): loader,
prompt, answer key and grader.

The loader reads a JSONL file given its path (nothing is downloaded); each line has
``problem``, ``solution``, ``answer`` (the reference final answer, LaTeX), ``subject``,
``level`` and ``unique_id``. A completion's answer is its last ``\\boxed{}``
(:func:`~metagen.tasks.boxed.extract_math_answer`); answers are compared with math-verify
(:class:`~metagen.tasks.math_equiv.MathEquivalence`, optional extra ``math``).

:data:`MATH_ANSWER_KEY` is what voting and MBR take (``answer_key=MATH_ANSWER_KEY``): boxed
extraction, math-verify equivalence, grouping by :func:`canonical_answer`;
:func:`math_answer_key` builds one with another timeout.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.tasks.boxed import extract_math_answer
from metagen.tasks.chat_format import math_chat
from metagen.tasks.jsonl import read_jsonl
from metagen.tasks.math_equiv import MathEquivalence, canonical_answer



def math_answer_key(timeout_s: int = 2) -> AnswerKey:
    """MATH's answer key with ``timeout_s`` seconds per math-verify parse / verify call."""
    return AnswerKey("math", extract_math_answer, MathEquivalence(timeout_s), canonical_answer)


MATH_EQUIVALENCE = MathEquivalence()
MATH_ANSWER_KEY = AnswerKey("math", extract_math_answer, MATH_EQUIVALENCE, canonical_answer)


@dataclass(slots=True, frozen=True)
class MathProblem:
    """One MATH-500 item: ``uid`` is the data set's ``unique_id``; ``answer`` the gold LaTeX."""

    uid: str
    problem: str
    answer: str
    solution: str
    subject: str
    level: int


def load_math500(path: str | Path, limit: int | None = None) -> list[MathProblem]:
    """Read a MATH-500 JSONL file. Raises ``FileNotFoundError``, or ``InvalidParameterError``
    (naming the file and line) on a malformed record."""
    name = Path(path).name

    def parse(rec: dict[str, Any], lineno: int) -> MathProblem:
        item = MathProblem(str(rec["unique_id"]), rec["problem"], rec["answer"],
                           rec["solution"], rec["subject"], int(rec["level"]))
        if not isinstance(item.answer, str) or not item.answer.strip():
            raise InvalidParameterError(f"{name}:{lineno}", item.answer, "no gold answer")
        return item

    return read_jsonl(path, parse, limit)


def format_math_prompt(problem: MathProblem) -> str:
    """Zero-shot prompt asking for the final answer in ``\\boxed{}``."""
    return (f"Problem: {problem.problem}\n"
            "Solve the problem step by step. Put the final answer in \\boxed{}.\nSolution:\n")


#: MATH-500 in chat form: the problem, then Qwen2.5-Math's instruction (step by step, the final
#: answer in ``\boxed{}``).
MATH_CHAT = math_chat(lambda p: p.problem)


def grade_math(completion_text: str, problem: MathProblem,
               equivalence: MathEquivalence = MATH_EQUIVALENCE) -> bool:
    """True when the completion's last boxed answer is equivalent to the gold answer
    (math-verify, gold first). No boxed answer grades False."""
    if not isinstance(completion_text, str):
        raise InvalidParameterError("completion_text", completion_text, "must be a str")
    return equivalence.gold_matches(problem.answer, extract_math_answer(completion_text))
