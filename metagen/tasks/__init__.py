"""metagen.tasks: benchmark loaders, answer extraction, equivalence and graders.

- :mod:`metagen.tasks.gsm8k` — GSM8K (last ``#### N``, numbers compared),
  :data:`GSM8K_ANSWER_KEY`.
- :mod:`metagen.tasks.math500` — MATH-500 (last ``\\boxed{}``, math-verify equivalence: optional
  extra ``math``), :data:`MATH_ANSWER_KEY`.
- :class:`~metagen.answers.key.AnswerKey` (in :mod:`metagen.answers`, below the strategies
  that take it; also importable from :mod:`metagen.tasks.answer_key`), what voting and MBR take
  as ``answer_key=`` instead of the GSM8K default extractor.
- :mod:`metagen.tasks.humaneval` — HumanEval (164 functions, ``check(candidate)``) and
  :mod:`metagen.tasks.mbpp` — MBPP (standard split, 3-shot prompt, three asserts each): both
  :class:`CodeProblem`, graded by unit tests in the sandbox with :func:`grade_code` (the
  program in its own process behind the trusted tests; needs the code-execution opt-in).
- :mod:`metagen.tasks.code_feedback` — :func:`~metagen.tasks.code_feedback.execution_feedback`,
  the self-debug feedback source for ``refine_with_feedback`` (imported from its module).
- :mod:`metagen.tasks.pass_at_k` — :func:`pass_at_k`, the unbiased estimator of Chen et al.
"""

from metagen.sandbox.code_problem import CODE_LIMITS, CodeProblem, assemble_program, grade_code
from metagen.tasks.humaneval import load_humaneval
from metagen.tasks.mbpp import MBPP_SPLITS, UNPASSABLE, load_mbpp, mbpp_entry_point
from metagen.tasks.pass_at_k import mean_pass_at_k, pass_at_k

__all__ = ["CODE_LIMITS", "MBPP_SPLITS", "UNPASSABLE", "CodeProblem", "assemble_program",
           "grade_code", "load_humaneval", "load_mbpp", "mbpp_entry_point", "mean_pass_at_k",
           "pass_at_k"]
