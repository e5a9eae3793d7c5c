"""GSM8K (Cobbe et al. 2021): a loader of the JSONL files and the grader.

The loader reads a file given its path (nothing is downloaded). Each line is
``{"question": ..., "answer": "...reasoning...\\n#### 18"}``; the reference answer is extracted
with the same :func:`~metagen.tasks.answer.extract_answer` a model's completion is graded with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from metagen.errors import InvalidParameterError
from metagen.tasks.answer import answers_match, extract_answer
from metagen.tasks.answer_key import AnswerKey

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
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidParameterError("limit", limit, "must be a non-negative integer or None")
    p = Path(path)
    out: list[GSM8KProblem] = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                question, solution = rec["question"], rec["answer"]
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise InvalidParameterError(f"{p.name}:{lineno}", line[:80], f"bad record ({exc})")
            answer = extract_answer(solution)
            if answer is None:
                raise InvalidParameterError(f"{p.name}:{lineno}", solution[-80:], "no final answer")
            out.append(GSM8KProblem(f"{p.stem}-{lineno - 1}", question, answer, solution))
    return out


def format_gsm8k_prompt(problem: GSM8KProblem) -> str:
    """Zero-shot prompt in the testbed's format: ``Question: ...\\nAnswer:\\n``."""
    return f"Question: {problem.question}\nAnswer:\n"


def grade_gsm8k(completion_text: str, problem: GSM8KProblem) -> bool:
    """True when the completion's extracted final answer equals the reference number."""
    return answers_match(extract_answer(completion_text), problem.answer)
