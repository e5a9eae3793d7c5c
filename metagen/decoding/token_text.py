"""The bytes each token adds to a decoded text: one table per tokenizer, built once.

A text constraint over the output (:mod:`metagen.decoding.bad_text`) needs, for every token
id, the bytes that appending it adds to the text (``"▁Lily"`` -> ``b" Lily"`` for SentencePiece,
``"Ġ="`` -> ``b" ="`` for byte-level BPE, ``"<0x0A>"`` -> ``b"\\n"`` for a byte-fallback token).
The table is read from the tokenizer's decoder: byte-level decoders map each character back to
its byte (GPT-2's byte alphabet); SentencePiece-style decoders apply their ``Replace`` /
``Metaspace`` rules and ``ByteFallback``. For any other decoder each token's text is read as the
difference between decoding an anchor token followed by it and decoding the anchor alone.

Special tokens add nothing (completions are decoded with ``skip_special_tokens``), and so do ids
past the tokenizer's vocabulary. The concatenation of the table's entries for a token sequence is
the UTF-8 text ``tokenizer.decode`` gives for it in the middle of a text, before any clean-up of
spaces a tokenizer's ``decode`` may apply on top (``clean_up_tokenization_spaces``).
"""

from __future__ import annotations

import bisect
import itertools
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from metagen.decoding.per_tokenizer import PerTokenizer

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


def _gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's printable alphabet for the 256 bytes, inverted (character -> byte)."""
    keep = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
            + list(range(ord("®"), ord("ÿ") + 1)))
    chars, extra = list(keep), 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


_BYTE_DECODER = _gpt2_byte_decoder()


class TokenTexts:
    """``table[i]``: the bytes token ``i`` adds to a text; sorted for prefix queries.

    ``starting_with(prefix)`` and ``containing(word)`` are cached (a request's bad words ask the
    same questions at every step)."""

    def __init__(self, table: Sequence[bytes]) -> None:
        self.table: tuple[bytes, ...] = tuple(table)
        usable = sorted((b, i) for i, b in enumerate(self.table) if b)
        self._keys = [b for b, _ in usable]
        self._ids = [i for _, i in usable]
        self._joined = b"\0".join(self.table)  # one C-speed search for `containing`
        self._starts = list(itertools.accumulate((len(b) + 1 for b in self.table[:-1]),
                                                 initial=0))
        self.starting_with = lru_cache(maxsize=4096)(self._starting_with)
        self.containing = lru_cache(maxsize=256)(self._containing)

    def _starting_with(self, prefix: bytes) -> tuple[int, ...]:
        """Ids whose bytes start with ``prefix`` (non-empty)."""
        lo = bisect.bisect_left(self._keys, prefix)
        hi = lo
        while hi < len(self._keys) and self._keys[hi].startswith(prefix):
            hi += 1
        return tuple(self._ids[lo:hi])

    def _containing(self, word: bytes) -> tuple[int, ...]:
        """Ids whose bytes contain ``word`` (non-empty): its occurrences in the table joined by
        NUL bytes, each mapped to its token (a word without NUL never spans two tokens)."""
        if b"\0" in word:
            return tuple(i for i, b in enumerate(self.table) if word in b)
        found: list[int] = []
        at = self._joined.find(word)
        while at >= 0:
            token = bisect.bisect_right(self._starts, at) - 1
            found.append(token)
            at = self._joined.find(word, self._starts[token] + len(self.table[token]) + 1)
        return tuple(found)

    def tail(self, ids: Sequence[int], size: int) -> bytes:
        """The last ``size`` (or fewer) bytes of the text of ``ids`` (ids out of the table add
        nothing); reads only the last tokens it needs."""
        parts: list[bytes] = []
        got, n = 0, len(self.table)
        for tok in reversed(ids):
            if got >= size:
                break
            piece = self.table[tok] if 0 <= tok < n else b""
            parts.append(piece)
            got += len(piece)
        return b"".join(reversed(parts))[-size:] if size > 0 else b""


def _byte_level(piece: str) -> bytes:
    """A byte-level BPE piece's bytes (an added token outside the byte alphabet: its UTF-8)."""
    if all(c in _BYTE_DECODER for c in piece):
        return bytes(_BYTE_DECODER[c] for c in piece)
    return piece.encode("utf-8")


def _decoder_spec(tokenizer: Any) -> dict[str, Any] | None:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None) if backend is not None else None
    if decoder is None:
        return None
    try:
        spec = json.loads(decoder.__getstate__())
    except (TypeError, ValueError, AttributeError):
        return None
    return spec if isinstance(spec, dict) else None


def _steps(spec: dict[str, Any]) -> list[dict[str, Any]]:
    if spec.get("type") == "Sequence":
        return [s for s in spec.get("decoders", []) if isinstance(s, dict)]
    return [spec]


def _piece_rule(spec: dict[str, Any] | None) -> Any:
    """A function piece -> bytes for a decoder this module reads, else None."""
    if spec is None:
        return None
    steps = _steps(spec)
    kinds = {s.get("type") for s in steps}
    if kinds == {"ByteLevel"}:
        return _byte_level
    if not kinds <= {"Replace", "ByteFallback", "Fuse", "Strip", "Metaspace"}:
        return None
    replaces: list[tuple[str, str]] = []
    for s in steps:
        if s.get("type") == "Replace":
            pattern = s.get("pattern", {})
            if "String" not in pattern:
                return None  # a regex replacement: not read here
            replaces.append((pattern["String"], s.get("content", "")))
        elif s.get("type") == "Metaspace":
            replaces.append((s.get("replacement", "\u2581"), " "))
    byte_fallback = "ByteFallback" in kinds

    def rule(piece: str) -> bytes:
        match = _BYTE_PIECE.match(piece) if byte_fallback else None
        if match:
            return bytes([int(match.group(1), 16)])
        for old, new in replaces:
            piece = piece.replace(old, new)
        return piece.encode("utf-8")

    return rule


def _by_decoding(tokenizer: Any, ids: Sequence[int]) -> list[bytes]:
    """Each token's text as decode(anchor + token) minus decode(anchor)."""
    anchor = list(tokenizer("a", add_special_tokens=False)["input_ids"])[-1:]
    head = tokenizer.decode(anchor, skip_special_tokens=True)
    out: list[bytes] = []
    for i in ids:
        text = tokenizer.decode(anchor + [i], skip_special_tokens=True)
        out.append(text[len(head):].encode("utf-8") if text.startswith(head) else
                   text.encode("utf-8"))
    return out


def build_token_texts(tokenizer: Any) -> TokenTexts:
    """The :class:`TokenTexts` of a Hugging Face tokenizer (``len(tokenizer)`` ids)."""
    n = len(tokenizer)
    special = set(tokenizer.all_special_ids)
    rule = _piece_rule(_decoder_spec(tokenizer))
    ids = list(range(n))
    if rule is not None:
        pieces = tokenizer.convert_ids_to_tokens(ids)
        table = [rule(p) if p else b"" for p in pieces]
    else:
        table = _by_decoding(tokenizer, ids)
    return TokenTexts([b"" if i in special else t for i, t in enumerate(table)])


_TABLES: PerTokenizer[TokenTexts] = PerTokenizer(build_token_texts)


def token_texts(tokenizer: Any) -> TokenTexts:
    """The :class:`TokenTexts` of ``tokenizer``, built on first use and cached while the
    tokenizer lives."""
    return _TABLES(tokenizer)
