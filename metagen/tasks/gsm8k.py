"""GSM8K (Cobbe et al. 2021): a loader of the JSONL files and the grader.

The loader reads a file given its path (nothing is downloaded). Each line is
``{"question": ..., "answer": "...reasoning...\\n#### 18"}``; the reference answer is extracted
with the same :func:`~metagen.answers.numeric.extract_answer` a model's completion is graded with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.answers.numeric import answers_match, extract_answer
from metagen.errors import InvalidParameterError
from metagen.tasks.chat_format import math_chat
from metagen.tasks.jsonl import read_jsonl

#: GSM8K's answer key: the last ``#### N`` (else last number), compared as numbers. The same
#: extraction and match voting uses by default, so ``answer_key=GSM8K_ANSWER_KEY`` changes
#: nothing (no canonical form: grouping stays one ``answers_match`` per class representative).
GSM8K_ANSWER_KEY = AnswerKey("gsm8k", extract_answer, answers_match)


@dataclass(slots=True, frozen=True)
class GSM8KProblem:
    """One GSM8K item: ``answer`` is the normalised final number, ``solution`` the full reference."""

    uid: str
    question: str
    answer: str
    solution: str


def load_gsm8k(path: str | Path, limit: int | None = None) -> list[GSM8KProblem]:
    """Read a GSM8K JSONL file. Raises ``FileNotFoundError`` or ``InvalidParameterError``
    (naming the line) on a malformed record."""
    name = Path(path)

    def parse(rec: dict[str, Any], lineno: int) -> GSM8KProblem:
        question, solution = rec["question"], rec["answer"]
        answer = extract_answer(solution)
        if answer is None:
            raise InvalidParameterError(f"{name.name}:{lineno}", solution[-80:],
                                        "no final answer")
        return GSM8KProblem(f"{name.stem}-{lineno - 1}", question, answer, solution)

    return read_jsonl(name, parse, limit)


def format_gsm8k_prompt(problem: GSM8KProblem) -> str:
    """Zero-shot prompt in the testbed's format: ``Question: ...\\nAnswer:\\n``."""
    return f"Question: {problem.question}\nAnswer:\n"


#: GSM8K in chat form: the question, then Qwen2.5-Math's instruction (step by step, the answer
#: in ``\boxed{}``; the grader's last-number rule reads the boxed number).
GSM8K_CHAT = math_chat(lambda p: p.question)


def grade_gsm8k(completion_text: str, problem: GSM8KProblem) -> bool:
    """True when the completion's extracted final answer equals the reference number."""
    return answers_match(extract_answer(completion_text), problem.answer)
