"""The answer of a thinking model's completion: what follows its ``<think>...</think>`` block.

Thinking models (DeepSeek-R1, Qwen3, QwQ) write their reasoning first and close it with an end
token (``</think>``; the opening ``<think>`` is often written by the chat template, so it need
not be in the completion). Grading and answer extraction read only the text after the block,
as lm-evaluation-harness does with its ``think_end_token``: a number or ``\\boxed{}`` inside
the reasoning is never taken for the answer.
"""

from __future__ import annotations

from metagen.errors import InvalidParameterError

THINK_END = "</think>"


def answer_after_thinking(text: str, end_token: str = THINK_END) -> str | None:
    """The text after the LAST ``end_token`` in ``text``, leading whitespace removed; None when
    ``end_token`` does not occur (the completion never closed its thinking -- e.g. it ran out
    of tokens --, so it has no answer, and grades as wrong). Pure.

    ``answer_after_thinking("<think>2+2=5?</think>\\n\\nIt is 4.")`` is ``"It is 4."``;
    ``answer_after_thinking("<think>still thinking")`` is None. Raises
    ``InvalidParameterError`` naming ``think_end_token`` when ``end_token`` is empty."""
    check_end_token(end_token)
    at = text.rfind(end_token)
    if at < 0:
        return None
    return text[at + len(end_token):].lstrip()


def check_end_token(end_token: object) -> str:
    """``end_token`` when it is a non-empty string without surrounding whitespace, else
    ``InvalidParameterError`` naming ``think_end_token``."""
    if not isinstance(end_token, str) or not end_token or end_token.strip() != end_token:
        raise InvalidParameterError("think_end_token", end_token,
                                    "must be a non-empty string (e.g. </think>) without "
                                    "surrounding whitespace")
    return end_token
