"""Number answers, GSM8K style, re-exported from :mod:`metagen.answers.numeric` (their home,
below the voting strategies and verifiers that default to them), so that
``from metagen.tasks.answer import extract_answer`` keeps working."""

from metagen.answers.numeric import answers_match, extract_answer, normalize_number

__all__ = ["answers_match", "extract_answer", "normalize_number"]
