"""``bad_words`` as text: the output never contains a banned string, however it is tokenized.

The rule, at every step: token ``t`` is removed when the output's text so far followed by
``t``'s text (:mod:`metagen.decoding.token_text`) contains a banned string that the output so far
did not. A banned string can straddle several tokens (``"Lily"`` as ``"Li" + "ly"`` or
``"L" + "i" + "l" + "y"``): the token that would complete it is the one removed, whichever
tokenization led there. Matching is on UTF-8 bytes, case-sensitive, anywhere in the text
(``"Lily"`` also bans ``"Lilypad"``).

What counts as the output's text: the concatenation of the generated tokens' texts, from the
first generated token on. The prompt does not count (a prompt ending in ``"Li"`` does not ban an
output starting ``"ly"``); with token healing the re-produced end of the prompt counts as output
(it is generated). The check runs on everything generated, a stop string included, so a returned
text (cut before its stop string) never contains a banned string, and a stop string containing
one can never be produced.

Cost: a new occurrence ends inside the next token, so only the output's last ``max(len) - 1``
bytes matter; per banned string ``w`` and per ``k`` with the tail ending in ``w[:k]``, the ids
whose text starts with ``w[k:]`` come from a sorted index, and the ids whose text contains ``w``
whole are found once per tokenizer and word (:class:`~metagen.decoding.token_text.TokenTexts`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from metagen.decoding.token_text import TokenTexts, token_texts


class BadText:
    """The ban of one request's ``bad_words`` over a vocabulary's token texts (immutable)."""

    __slots__ = ("words", "texts", "always", "_hold")

    def __init__(self, words: Iterable[str], texts: TokenTexts) -> None:
        """``words``: non-empty strings (``SamplingParams`` checks them)."""
        self.words: tuple[bytes, ...] = tuple(dict.fromkeys(w.encode("utf-8") for w in words
                                                            if w))
        self.texts = texts
        always: set[int] = set()
        for word in self.words:
            always.update(texts.containing(word))
        self.always: tuple[int, ...] = tuple(sorted(always))
        self._hold = max((len(w) for w in self.words), default=1) - 1

    def banned(self, output_ids: Sequence[int]) -> list[int]:
        """The ids the token after ``output_ids`` (the generated tokens so far) may not take:
        those whose text would complete a banned string (see the module docstring). Pure."""
        out = list(self.always)
        if not self._hold:
            return out
        tail = self.texts.tail(output_ids, self._hold)
        if not tail:
            return out
        for word in self.words:
            for k in range(min(len(word) - 1, len(tail)), 0, -1):
                if tail.endswith(word[:k]):
                    out.extend(self.texts.starting_with(word[k:]))
        return out


def bad_text(tokenizer: Any, words: Sequence[str]) -> BadText | None:
    """The :class:`BadText` of ``words`` over ``tokenizer``'s token texts (built once per
    tokenizer); ``None`` when ``words`` is empty."""
    if not words:
        return None
    return BadText(words, token_texts(tokenizer))
