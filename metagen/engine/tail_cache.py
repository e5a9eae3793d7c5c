"""Partial last blocks of finished sequences, kept so that a continuation starts on all of its
computed KV.

The radix cache holds whole blocks only, so a sequence that ends inside a block leaves that
block's computed tokens behind. A step search sends exactly such continuations: every step is a
new request ``prompt + steps so far``, and without this cache each one recomputes the tokens of
its predecessor's partial block (up to ``block_size - 1`` per request per step). This cache keeps
that block, keyed by its tokens and by the whole-block prefix before it (the KV of a position
depends on every token before it, never on which physical blocks held them).

Ownership: the cache holds one reference (``BlockManager.incref``) on every block it keeps. A
sequence that takes a tail increfs it and shares it read-only; its first write into the block
copies it (copy-on-write, as for any shared block). At most ``max_entries`` tails are kept, the
least recently used leaving first; :meth:`evict` frees them under memory pressure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from metagen.engine.block_manager import BlockManager
from metagen.errors import InvalidParameterError

Key = tuple[tuple[int, ...], tuple[int, ...]]  # (whole-block prefix tokens, tail tokens)


class TailCache:
    """LRU map ``(prefix tokens, tail tokens) -> block`` of partial blocks (see module doc).
    Single-threaded, like the engine loop that owns it."""

    def __init__(self, block_manager: BlockManager, max_entries: int) -> None:
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 0:
            raise InvalidParameterError("max_entries", max_entries,
                                        "must be a non-negative integer")
        self.block_manager = block_manager
        self.block_size = block_manager.block_size
        self.max_entries = max_entries
        self._entries: OrderedDict[Key, int] = OrderedDict()
        self._tails: dict[tuple[int, ...], list[tuple[int, ...]]] = {}  # prefix -> its tails

    def __len__(self) -> int:
        return len(self._entries)

    def blocks(self) -> list[int]:
        """Every block kept (each holds one cache reference; one block may be kept twice)."""
        return list(self._entries.values())

    def put(self, tokens: Sequence[int], num_computed: int, block_table: Sequence[int]) -> bool:
        """Keep the partial block of a sequence whose first ``num_computed`` tokens of
        ``tokens`` have KV in ``block_table``; return whether a tail was added (none when
        ``num_computed`` ends on a block boundary, the same tail is kept already, or
        ``max_entries`` is 0)."""
        bs = self.block_size
        full, part = divmod(min(num_computed, len(tokens)), bs)
        if not part or self.max_entries == 0 or full >= len(block_table):
            return False
        key = (tuple(tokens[:full * bs]), tuple(tokens[full * bs:full * bs + part]))
        if key in self._entries:
            self._entries.move_to_end(key)
            return False
        block = block_table[full]
        self.block_manager.incref([block])
        self._entries[key] = block
        self._tails.setdefault(key[0], []).append(key[1])
        while len(self._entries) > self.max_entries:
            self._drop(next(iter(self._entries)))
        return True

    def take(self, tokens: Sequence[int], num_full: int, limit: int) -> tuple[int, int] | None:
        """The longest kept tail continuing ``tokens[:num_full * block_size]`` with tokens of
        ``tokens[:limit]``: ``(block, tail length)`` with a new reference for the caller, or
        None. Marks it recently used."""
        start = num_full * self.block_size
        tails = self._tails.get(tuple(tokens[:start]))
        if not tails:
            return None
        room = limit - start
        best: tuple[int, ...] | None = None
        for t in tails:
            if len(t) <= room and (best is None or len(t) > len(best)) \
                    and tuple(tokens[start:start + len(t)]) == t:
                best = t
        if best is None:
            return None
        key = (tuple(tokens[:start]), best)
        self._entries.move_to_end(key)
        block = self._entries[key]
        self.block_manager.incref([block])
        return block, len(best)

    def evict(self, num_blocks: int) -> int:
        """Drop least recently used tails until ``num_blocks`` blocks went back to the free list
        or none is left; return how many were freed (a tail a sequence still shares leaves the
        cache without freeing its block)."""
        freed = 0
        while freed < num_blocks and self._entries:
            freed += self._drop(next(iter(self._entries)))
        return freed

    def clear(self) -> None:
        """Drop every tail."""
        while self._entries:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: Key) -> int:
        block = self._entries.pop(key)
        tails = self._tails[key[0]]
        tails.remove(key[1])
        if not tails:
            del self._tails[key[0]]
        last = self.block_manager.refcount(block) == 1
        self.block_manager.free([block])
        return int(last)
