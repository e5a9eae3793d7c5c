"""Programmatic verifiers: answer match against a reference.

:class:`AnswerMatch` is a :class:`~metagen.scorers.base.RewardModel` that returns 1.0 when the
answer extracted from a completion matches the reference answer of its prompt, else 0.0. A
completion with no extractable answer scores 0.0 (that is a wrong answer, not a failed call).
Answer extraction and comparison default to :mod:`metagen.answers.numeric` (GSM8K conventions:
the last ``#### N``, else the last number) and are injectable. Chat prompts are accepted with a
single reference or a callable reference (which receives the messages); a mapping reference is
keyed by prompt strings, so it refuses chat prompts with ``InvalidPromptError`` naming
``prompts``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.generators.base import Prompt
from metagen.scorers.base import check_same_length

Extract = Callable[[str], "str | None"]
Match = Callable[[Any, Any], bool]


def default_extract() -> Extract:
    """``metagen.answers.numeric.extract_answer`` (imported lazily)."""
    from metagen.answers.numeric import extract_answer
    return extract_answer


def default_match() -> Match:
    """``metagen.answers.numeric.answers_match`` (imported lazily)."""
    from metagen.answers.numeric import answers_match
    return answers_match


class AnswerMatch:
    """1.0 if ``extract(completion)`` matches the prompt's reference answer, else 0.0.

    ``reference`` is one answer for every prompt, a mapping prompt -> answer (string prompts
    only), or a callable prompt -> answer (it gets a chat prompt's messages as they are). A
    prompt without a reference raises ``KeyError`` (never a guessed score); a chat prompt with
    a mapping reference raises ``InvalidPromptError`` naming ``prompts``.
    """

    __slots__ = ("reference", "extract", "match")

    def __init__(self, reference: Any, *, extract: Extract | None = None,
                 match: Match | None = None) -> None:
        if reference is None:
            raise InvalidParameterError("reference", reference, "a reference answer is required")
        self.reference = reference
        self.extract = extract or default_extract()
        self.match = match or default_match()

    def _reference_for(self, prompt: Prompt) -> Any:
        if isinstance(self.reference, Mapping):
            if not isinstance(prompt, str):
                raise InvalidPromptError(
                    "prompts", "<chat messages>", "AnswerMatch's reference mapping is keyed by "
                    "string prompts; give a callable reference (it receives the messages) or "
                    "one reference answer")
            if prompt not in self.reference:
                raise KeyError(f"no reference answer for prompt {prompt[:80]!r}")
            return self.reference[prompt]
        if callable(self.reference):
            return self.reference(prompt)
        return self.reference

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        out = []
        for prompt, text in zip(prompts, completions):
            answer = self.extract(text)
            ok = answer is not None and self.match(answer, self._reference_for(prompt))
            out.append(1.0 if ok else 0.0)
        return out
