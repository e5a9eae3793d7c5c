"""Incremental detokenization with stop strings that never leak into a stream.

The text of a completion is decoded together with a few prompt tokens of context (so a
SentencePiece leading space or a multi-token character decodes as it would inside the full text).
Stop strings are searched only in the newly decoded tail. :meth:`Detokenizer.stream_text` holds
back ``max(len(stop)) - 1`` characters and any trailing incomplete character (U+FFFD) until the
completion finishes, so a partial stop string is never emitted (vLLM's rule).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.decoding.healing import text_after

_CONTEXT_TOKENS = 4


class Detokenizer:
    """Text of one sequence's output tokens; detects stop strings.

    With stop strings the text is re-decoded after every token (a stop string must be found
    when it appears); without them, when :attr:`text` is read (a streaming caller reads it each
    step, a plain one once, at the end)."""

    __slots__ = ("tokenizer", "stop", "hold", "context", "base", "healed", "_text", "_pending",
                 "searched", "stopped_at")

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int], stop: Sequence[str] = (),
                 healed: Sequence[int] = ()) -> None:
        """``healed``: prompt tokens removed by token healing after ``prompt_ids``; the text
        starts after the output re-produces them."""
        self.tokenizer = tokenizer
        self.healed = bool(healed)
        self.stop = tuple(stop)
        self.hold = max((len(s) for s in self.stop), default=1) - 1
        self.context = list(prompt_ids[-_CONTEXT_TOKENS:])
        self.base = self._decode(self.context + list(healed)) if tokenizer is not None else ""
        self._text = ""
        self._pending: Sequence[int] | None = None  # output ids whose text is not decoded yet
        self.searched = 0  # characters of text already searched for stop strings
        self.stopped_at: str | None = None

    @property
    def text(self) -> str:
        """The output's text (cut before the stop string found, if one was)."""
        if self._pending is not None:
            self._text, self._pending = self._text_of(self._pending), None
        return self._text

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def _text_of(self, output_ids: Sequence[int]) -> str:
        full = self._decode(self.context + list(output_ids))
        return text_after(self.base, full, lambda: self._decode(output_ids), self.healed)

    def update(self, output_ids: Sequence[int], check_stop: bool = True) -> str | None:
        """Take the output's new tokens (``output_ids``: all of them, a list the caller keeps
        current); with stop strings, re-decode now and return the stop string found (the text
        is cut before it)."""
        if self.tokenizer is None or self.stopped_at is not None:
            return self.stopped_at
        if not self.stop:
            self._pending = output_ids
            return None
        self._text, self._pending = self._text_of(output_ids), None
        if not check_stop:
            self.searched = max(0, len(self._text) - self.hold)
            return None
        start = max(0, self.searched - self.hold)
        best: tuple[int, str] | None = None
        for s in self.stop:
            i = self._text.find(s, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, s)
        self.searched = len(self._text)
        if best is not None:
            self._text = self._text[:best[0]]
            self.stopped_at = best[1]
        return self.stopped_at

    def stream_text(self, finished: bool) -> str:
        """The prefix of the text that is safe to emit now."""
        if finished:
            return self.text
        end = len(self.text) - self.hold
        while end > 0 and self.text[end - 1] == "\ufffd":
            end -= 1
        return self.text[:max(end, 0)]

    def copy(self) -> Detokenizer:
        """An independent copy (for a forked sequence)."""
        new = Detokenizer.__new__(Detokenizer)
        for name in Detokenizer.__slots__:
            setattr(new, name, getattr(self, name))
        new.context = list(self.context)
        new._text, new._pending = self.text, None  # decoded now: the copy's ids are its own
        return new
