"""Answer keys, re-exported from :mod:`metagen.answers.key` (their home, below the strategies and
scorers that take them), so that ``from metagen.tasks.answer_key import AnswerKey`` keeps
working."""

from metagen.answers.key import AnswerKey, group_by_canonical, resolve_answer_key

__all__ = ["AnswerKey", "group_by_canonical", "resolve_answer_key"]
