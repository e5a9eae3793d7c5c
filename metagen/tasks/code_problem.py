"""Code problems, re-exported from :mod:`metagen.sandbox.code_problem` (their home, below the
unit-test verifier that grades them), so that ``from metagen.tasks.code_problem import
CodeProblem`` keeps working."""

from metagen.sandbox.code_problem import (
    CODE_LIMITS,
    CodeProblem,
    assemble_program,
    extract_code,
    grade_code,
    problems_by_prompt,
)

__all__ = ["CODE_LIMITS", "CodeProblem", "assemble_program", "extract_code", "grade_code",
           "problems_by_prompt"]
