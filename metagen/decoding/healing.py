"""Token healing: back up over the prompt's last token(s) and make the first generated token(s)
re-produce the removed text, so a prompt ending mid-word (``"Once upon a ti"``) or with a
trailing space does not force the model across an unnatural token boundary.

Everything here works on the vocabulary's own token strings (``convert_ids_to_tokens``: ``▁ti``
for SentencePiece, ``Ġti`` for byte-level BPE), in which the text of a token sequence is the
concatenation of its tokens' strings, so "extends the removed text" is a plain prefix test.

- :func:`heal_prompt` splits the prompt ids into the ids kept and the ids removed (at most ``k``,
  stopping before a special token, a byte-fallback token, a token whose string is empty, or the
  first token of the prompt, so that the model is never left without context).
- :func:`healing_allowed` is the rule of each generated step while healing: with ``rest`` the part
  of the removed text the output has not yet re-produced, the next token may be one whose string
  starts with ``rest`` (healing ends with it), or one whose string is a non-empty proper prefix of
  ``rest`` (healing continues with what remains). Once ``rest`` is empty the output is free.
- :class:`VocabIndex` answers both questions from a sorted index of the vocabulary, built once
  per tokenizer (:func:`vocab_index`).
- :func:`text_after` is the text contract: a healed completion's text starts where the user's
  prompt ended (the re-produced text is not repeated; it is empty while only part of the removed
  text has been re-produced).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from metagen.decoding.per_tokenizer import PerTokenizer

_BYTE_TOKEN = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")  # SentencePiece byte fallback


class VocabIndex:
    """The vocabulary's token strings, sorted for prefix queries. Special tokens, byte-fallback
    tokens and empty strings are never candidates."""

    def __init__(self, pieces: Sequence[str | None], special_ids: Sequence[int] = ()) -> None:
        special = set(special_ids)
        self.pieces: tuple[str, ...] = tuple(p or "" for p in pieces)
        self.special = frozenset(special)
        usable = [(p, i) for i, p in enumerate(self.pieces)
                  if p and i not in special and not _BYTE_TOKEN.match(p)]
        usable.sort()
        self._keys = [p for p, _ in usable]
        self._ids = [i for _, i in usable]
        self._by_piece: dict[str, list[int]] = {}
        for p, i in usable:
            self._by_piece.setdefault(p, []).append(i)
        self.allowed = lru_cache(maxsize=1024)(self._allowed)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any) -> VocabIndex:
        """The index of a Hugging Face tokenizer (``len(tokenizer)`` ids)."""
        pieces = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        return cls(pieces, tokenizer.all_special_ids)

    def heals(self, token_id: int) -> bool:
        """The token may be removed from a prompt: not special, not a byte, non-empty string."""
        if token_id in self.special or not 0 <= token_id < len(self.pieces):
            return False
        piece = self.pieces[token_id]
        return bool(piece) and not _BYTE_TOKEN.match(piece)

    def extensions(self, prefix: str) -> list[int]:
        """Ids whose string starts with ``prefix`` (sorted by string)."""
        lo = bisect.bisect_left(self._keys, prefix)
        hi = lo
        while hi < len(self._keys) and self._keys[hi].startswith(prefix):
            hi += 1
        return self._ids[lo:hi]

    def proper_prefixes(self, text: str) -> list[int]:
        """Ids whose string is a non-empty proper prefix of ``text``."""
        out: list[int] = []
        for end in range(1, len(text)):
            out += self._by_piece.get(text[:end], ())
        return out

    def _allowed(self, rest: str) -> tuple[int, ...]:
        return tuple(sorted(set(self.extensions(rest)) | set(self.proper_prefixes(rest))))


_INDEXES: PerTokenizer[VocabIndex] = PerTokenizer(VocabIndex.from_tokenizer)


def vocab_index(tokenizer: Any) -> VocabIndex:
    """The :class:`VocabIndex` of ``tokenizer``, built on first use and cached while the
    tokenizer lives."""
    return _INDEXES(tokenizer)


@dataclass(slots=True, frozen=True)
class Healing:
    """What healing removed from one prompt: ``removed_ids`` (the prompt's last tokens) and
    ``removed`` (their concatenated token strings), with the index that defines the rule."""

    removed_ids: tuple[int, ...]
    removed: str
    index: VocabIndex

    def allowed(self, output_ids: Sequence[int]) -> tuple[int, ...] | None:
        """The ids the next token may take, or ``None`` when healing is over (see
        :func:`healing_allowed`)."""
        return healing_allowed(self.index, self.removed, output_ids)


def heal_prompt(prompt_ids: Sequence[int], index: VocabIndex, k: int = 1
                ) -> tuple[list[int], Healing | None]:
    """``(kept_ids, healing)``: the prompt without its last (up to ``k``) healable tokens, and
    what was removed; ``(prompt_ids, None)`` when nothing can be removed (see the module
    docstring) or nothing would change (the removed text has no extension but itself)."""
    ids = list(prompt_ids)
    cut = len(ids)
    while cut > 1 and len(ids) - cut < k and index.heals(ids[cut - 1]):
        cut -= 1
    removed_ids = tuple(ids[cut:])
    if not removed_ids:
        return ids, None
    removed = "".join(index.pieces[t] for t in removed_ids)
    if len(removed_ids) == 1 and index.allowed(removed) == removed_ids:
        return ids, None  # the only choice is the token removed: healing is a no-op
    return ids[:cut], Healing(removed_ids, removed, index)


def healing_allowed(index: VocabIndex, removed: str, output_ids: Sequence[int]
                    ) -> tuple[int, ...] | None:
    """The ids the token after ``output_ids`` may take while healing ``removed``, or ``None``
    once the output has re-produced all of it (or left it: a token forced by a caller outside
    the rule ends healing). Pure: the result depends on the arguments only."""
    rest = removed
    for tok in output_ids:
        piece = index.pieces[tok] if 0 <= tok < len(index.pieces) else ""
        if not piece or not rest.startswith(piece) or piece == rest:
            return None  # covered all of rest (an extension or exactly rest), or left the rule
        rest = rest[len(piece):]
    return index.allowed(rest)


def text_after(head: str, whole: str, fallback: Callable[[], str], partial: bool = False) -> str:
    """``whole`` minus its prefix ``head``; with ``partial`` (a healed prompt), ``""`` while
    ``whole`` is still a prefix of ``head``; else ``fallback()`` (the output decoded alone)."""
    if whole.startswith(head):
        return whole[len(head):]
    if partial and head.startswith(whole):
        return ""
    return fallback()
