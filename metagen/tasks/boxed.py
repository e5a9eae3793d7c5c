"""``\\boxed{}`` answer extraction for LaTeX solutions (MATH, MATH-500).

Contract of :func:`last_boxed`: the content of the **last** ``\\boxed{...}`` or ``\\fbox{...}`` in
the text, with nested braces matched (``\\boxed{(3,\\frac{\\pi}{2})}`` gives
``(3,\\frac{\\pi}{2})``); the brace-less form ``\\boxed 5`` gives the next token (``5``). Returns
``None`` when there is no boxed answer, or when the last one is unclosed (a truncated
generation: an earlier boxed expression is an intermediate result, not the answer). The
content is returned stripped, otherwise verbatim (no normalisation: see
:mod:`metagen.tasks.math_equiv`).

:func:`extract_math_answer` adds one fallback, the Minerva format ``final answer is $X$``; it
never falls back to "the last number" (that is the GSM8K convention, and on LaTeX it turns
``\\frac{14}{3}`` into ``3``).
"""

from __future__ import annotations

import re

_BOX = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
_FINAL = re.compile(r"final answer is\s*\$([^$]+)\$", re.IGNORECASE)


def _braced(text: str, start: int) -> str | None:
    """The content of the brace group opening at ``text[start] == "{"``; None if unclosed."""
    depth = 0
    for i in range(start, len(text)):
        ch = text[i]
        if ch == "\\":  # an escaped brace (\{ \}) does not open or close a group
            continue
        if ch == "{" and (i == 0 or text[i - 1] != "\\"):
            depth += 1
        elif ch == "}" and (i == 0 or text[i - 1] != "\\"):
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    return None


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed``/``\\fbox`` answer (see the module contract)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be str, got {type(text).__name__}")
    matches = list(_BOX.finditer(text))
    if not matches:
        return None
    end = matches[-1].end()
    rest = text[end:]
    stripped = rest.lstrip()
    if stripped.startswith("{"):
        content = _braced(text, end + len(rest) - len(stripped))
        return None if content is None else content.strip() or None
    token = re.match(r"[^\s$]+", stripped)  # \boxed 5 -> "5"
    return None if token is None else token.group(0).rstrip(".") or None


def extract_math_answer(text: str) -> str | None:
    """The last boxed answer, else the Minerva ``final answer is $X$``, else ``None``."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    if _BOX.search(text):
        return None  # an unclosed last \boxed: no answer, not an earlier guess
    finals = _FINAL.findall(text)
    return finals[-1].strip() or None if finals else None
