"""Final-answer extraction and comparison, GSM8K style (Cobbe et al. 2021).

One module for every task whose answers are numbers: the GSM8K grader, the testbed grader and
self-consistency voting (Wang et al. 2023) all normalise answers here, so that "1,000", "$1000"
and "1000." count as the same vote.

Contract of :func:`extract_answer`: the text after the **last** ``####`` marker if one is present
(its first number), else the **last** number anywhere in the text; the number is normalised
(commas and ``$`` removed, trailing ``.`` dropped, ``-0`` → ``0``, ``18.0`` → ``18``, leading ``+``
dropped). Returns ``None`` when there is no number.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# a number: optional sign, optional $, digits with optional thousands commas, optional decimals
_NUMBER = re.compile(r"[-+]?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-+]?\$?\.\d+")
_MARKER = "####"


def normalize_number(raw: str) -> str | None:
    """Canonical text of one number: ``"$1,000.50"`` → ``"1000.5"``, ``"42."`` → ``"42"``.

    Returns ``None`` when ``raw`` is not a number after removing ``$``, commas, spaces and one
    trailing period.
    """
    text = raw.strip().replace(",", "").replace("$", "").replace(" ", "")
    if text.endswith("."):
        text = text[:-1]
    if not text:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    for raw in reversed(found):
        norm = normalize_number(raw)
        if norm is not None:
            return norm
    return None


def extract_answer(text: str) -> str | None:
    """The normalised final answer of a solution text, or ``None`` (see the module contract)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    idx = text.rfind(_MARKER)
    if idx >= 0:
        tail = text[idx + len(_MARKER):]
        match = _NUMBER.search(tail.split("\n", 1)[0])
        if match is not None:
            norm = normalize_number(match.group(0))
            if norm is not None:
                return norm
        return None  # a final-answer marker without a number is an explicit non-answer
    return _last_number(text)


def answers_match(a: str | int | float | None, b: str | int | float | None) -> bool:
    """Whether two answers are the same number after normalisation. ``None`` matches nothing."""
    if a is None or b is None:
        return False
    na = normalize_number(str(a)) if not isinstance(a, str) else normalize_number(a)
    nb = normalize_number(str(b)) if not isinstance(b, str) else normalize_number(b)
    if na is None or nb is None:
        return False
    return Decimal(na) == Decimal(nb)
