"""The feedback interface: what a feedback source says about one attempt.

:class:`Feedback` and :data:`FeedbackFn` are what refinement (``refine_with_feedback``,
``treefinement``) consumes and what feedback sources — e.g. the sandboxed unit tests of
:func:`metagen.tasks.code_feedback.execution_feedback` — produce. They live here, below both,
so that a task's feedback source needs no strategy (they are re-exported by
:mod:`metagen.strategies.refine` and :mod:`metagen.strategies`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from metagen.generators.base import Prompt

__all__ = ["Feedback", "FeedbackFn"]


@dataclass(slots=True, frozen=True)
class Feedback:
    """What a feedback source says about one attempt: success, a message for the next attempt,
    and an optional score (higher is better) used to detect progress and pick the best."""

    ok: bool
    message: str = ""
    score: float | None = None


FeedbackFn = Callable[[Prompt, str], Feedback]
"""``feedback(prompt, attempt)``: the prompt as given (a string or chat messages)."""
