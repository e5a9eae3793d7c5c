"""metagen.answers: what strategies, scorers and tasks share about final answers.

A leaf below the algorithms and the tasks (it imports nothing of metagen but ``errors``):

- :mod:`metagen.answers.key` — :class:`AnswerKey` (a task's extract / match / canonical form),
  :func:`group_by_canonical` (answer classes for voting) and :func:`resolve_answer_key`.
- :mod:`metagen.answers.numeric` — number answers, GSM8K style: :func:`extract_answer`,
  :func:`answers_match`, :func:`normalize_number` (the default of voting and ``AnswerMatch``).
"""

from metagen.answers.key import AnswerKey, group_by_canonical, resolve_answer_key
from metagen.answers.numeric import answers_match, extract_answer, normalize_number

__all__ = ["AnswerKey", "answers_match", "extract_answer", "group_by_canonical",
           "normalize_number", "resolve_answer_key"]
