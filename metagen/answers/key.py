"""Answer keys: how a task's answers are extracted, compared and grouped for voting.

An :class:`AnswerKey` bundles ``extract(text) -> answer | None``, ``match(a, b) -> bool`` and an
optional ``canonical(answer) -> str``. Voting (``self_consistency``, ``weighted_vote``) and MBR's
answer utility take one as ``answer_key=``; it replaces their defaults whole, so a key whose
extractor finds no answer makes the sample abstain — never a fallback to GSM8K's "last number".

Contract of ``canonical``: answers with equal canonical forms are equivalent (``match`` holds).
:func:`group_by_canonical` relies on it to put such answers in one class without calling
``match``; only a *new* canonical form is compared, with ``match``, against one representative
of each existing class. For n answers with k distinct canonical forms and c classes that is at
most k x c <= n^2 ``match`` calls (O(n^2) in the worst case, usually far fewer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from metagen.errors import InvalidParameterError


@dataclass(frozen=True, slots=True)
class AnswerKey:
    """A task's answer extraction (``extract``), comparison (``match``) and, optionally, a
    hashable normal form (``canonical``, see the module contract)."""

    name: str
    extract: Callable[[str], Any]
    match: Callable[[Any, Any], bool]
    canonical: Callable[[Any], str] | None = None

    def __post_init__(self) -> None:
        for field in ("extract", "match"):
            if not callable(getattr(self, field)):
                raise InvalidParameterError(field, getattr(self, field), "must be callable")
        if self.canonical is not None and not callable(self.canonical):
            raise InvalidParameterError("canonical", self.canonical, "must be callable or None")


def group_by_canonical(answers: Sequence[Any], match: Callable[[Any, Any], bool],
                       canonical: Callable[[Any], str] | None = None) -> list[int | None]:
    """Class id of each answer (ids in order of first appearance; ``None`` stays ``None``).

    An answer joins the first class whose representative (its first answer) it ``match``-es,
    else opens a new class. With ``canonical``, answers of a canonical form already seen join
    its class without ``match`` calls (at most one scan of the representatives per new form).
    """
    by_form: dict[str, int] = {}
    reps: list[Any] = []
    ids: list[int | None] = []
    for answer in answers:
        if answer is None:
            ids.append(None)
            continue
        form = canonical(answer) if canonical is not None else None
        cls = by_form.get(form) if form is not None else None
        if cls is None:
            cls = next((k for k, rep in enumerate(reps) if match(answer, rep)), None)
            if cls is None:
                reps.append(answer)
                cls = len(reps) - 1
            if form is not None:
                by_form[form] = cls
        ids.append(cls)
    return ids


def resolve_answer_key(answer_key: AnswerKey | None, extract: Any, match: Any
                       ) -> tuple[Any, Any, Callable[[Any], str] | None]:
    """``(extract, match, canonical)`` for a strategy's ``answer_key`` / ``extract`` / ``match``
    arguments: the key's three when given (then ``extract`` and ``match`` must be ``None``),
    else ``(extract, match, None)`` unchanged (the caller applies its defaults)."""
    if answer_key is None:
        return extract, match, None
    if not isinstance(answer_key, AnswerKey):
        raise InvalidParameterError("answer_key", answer_key, "must be an AnswerKey")
    if extract is not None or match is not None:
        raise InvalidParameterError("answer_key", answer_key.name,
                                    "pass either answer_key or extract/match, not both")
    return answer_key.extract, answer_key.match, answer_key.canonical
