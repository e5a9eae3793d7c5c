"""HumanEval (Chen et al. 2021): 164 Python functions to complete, graded by unit tests.

The loader reads the data set's (gzip) JSONL file given its path (nothing is downloaded); each
line has ``task_id``, ``prompt`` (imports, helpers, the signature and docstring),
``entry_point``, ``canonical_solution`` (the body) and ``test`` (defines ``check(candidate)``).
Grading (:func:`~metagen.sandbox.code_problem.grade_code`) runs the prompt and ``check`` in the
trusted test process, with ``candidate`` the proxy of the program's ``entry_point``; the
prompt's helper functions used by ``check`` stay the data set's, never the program's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from metagen.sandbox.code_problem import CodeProblem
from metagen.tasks.chat_format import code_chat
from metagen.tasks.jsonl import read_jsonl


def load_humaneval(path: str | Path, limit: int | None = None) -> list[CodeProblem]:
    """Read HumanEval (``HumanEval.jsonl.gz`` or plain JSONL). Raises ``FileNotFoundError`` or
    ``InvalidParameterError`` (naming the line) on a malformed record."""

    def parse(rec: dict[str, Any], lineno: int) -> CodeProblem:
        prompt, entry = rec["prompt"], rec["entry_point"]
        for key in ("task_id", "prompt", "entry_point", "canonical_solution", "test"):
            if not isinstance(rec[key], str):
                raise TypeError(f"{key} must be a string")
        if not entry.isidentifier():
            raise ValueError(f"entry_point {entry!r} is not a name")
        return CodeProblem(
            task_id=rec["task_id"], prompt=prompt, entry_point=entry,
            tests=(f"{rec['test']}\n\ncheck({entry})\n",), setup=(prompt,), prefix=prompt,
            reference=prompt + rec["canonical_solution"])

    return read_jsonl(path, parse, limit)


#: HumanEval in chat form: EvalPlus's code instruction around the function's stub (imports,
#: signature, docstring); the answer's first python block is the program (it redefines the
#: entry point, which then replaces the stub:
#: :func:`~metagen.sandbox.code_problem.assemble_program`).
HUMANEVAL_CHAT = code_chat(lambda p: p.prompt.strip())
