"""Paged KV-cache memory: a reference-counted allocator of fixed-size blocks.

The engine's KV cache is ``num_blocks`` blocks of ``block_size`` token slots each (the paged
attention layout of Kwon et al. 2023, "Efficient Memory Management for Large Language Model
Serving with PagedAttention"). A sequence owns a *block table* (a list of block ids); blocks are
shared by reference count between forked sequences and the radix prefix cache, and a shared
block is copied before it is written (:meth:`BlockManager.copy_on_write`).

The memory budget is the block count: the manager never hands out more than ``num_blocks``
blocks, and a request it cannot satisfy raises :class:`OutOfBlocks` without allocating anything.
This module is pure Python (no torch); the caller moves the KV data.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from metagen.errors import InvalidParameterError, MetagenError


class OutOfBlocks(MetagenError):
    """Not enough free KV blocks. Free some (finish/preempt sequences, evict the prefix cache)."""

    def __init__(self, requested: int, available: int) -> None:
        super().__init__(
            f"out of KV blocks: requested {requested}, {available} free; "
            "finish or preempt sequences, evict the prefix cache, or raise the memory budget")
        self.requested = requested
        self.available = available


class IntegrityError(MetagenError, AssertionError):
    """An executable invariant of an engine data structure does not hold (a bug, not bad input)."""


def _check_count(name: str, n: object) -> int:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidParameterError(name, n, "must be a non-negative integer")
    return n


class BlockManager:
    """Reference-counted allocator of ``num_blocks`` KV blocks of ``block_size`` tokens each.

    Contracts:

    - :meth:`allocate` hands out blocks with refcount 1, or raises :class:`OutOfBlocks` and
      changes nothing. The free list is LIFO (the block freed last is handed out first); the
      first allocation from a fresh manager returns ``0, 1, 2, ...``.
    - :meth:`incref` and :meth:`free` take the blocks of a fork, a sequence or the prefix cache;
      a block listed twice is counted twice. Both validate every id first and raise
      :class:`~metagen.errors.InvalidParameterError` (changing nothing) for an id out of range,
      for sharing a free block, or for freeing more references than a block holds (double free).
    - Single-threaded: the engine loop owns the manager.
    """

    __slots__ = ("num_blocks", "block_size", "_refcounts", "_free")

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise InvalidParameterError("num_blocks", num_blocks, "must be a positive integer")
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
            raise InvalidParameterError("block_size", block_size, "must be a positive integer")
        self.num_blocks: int = num_blocks
        self.block_size: int = block_size
        self._refcounts: list[int] = [0] * num_blocks
        # LIFO stack: the end of the list is handed out next.
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))

    # -- queries ---------------------------------------------------------------------------

    @property
    def num_free(self) -> int:
        """Blocks on the free list (refcount 0)."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Blocks with refcount >= 1."""
        return self.num_blocks - len(self._free)

    def can_allocate(self, n: int) -> bool:
        """True when :meth:`allocate` of ``n`` blocks would succeed."""
        return _check_count("n", n) <= len(self._free)

    def blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold ``num_tokens`` token slots (ceiling division)."""
        return -(-_check_count("num_tokens", num_tokens) // self.block_size)

    def refcount(self, block: int) -> int:
        """References held on ``block`` (0 when free)."""
        self._check_id(block)
        return self._refcounts[block]

    # -- mutations -------------------------------------------------------------------------

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` free blocks, each with refcount 1. Raises OutOfBlocks, allocating nothing."""
        _check_count("n", n)
        if n > len(self._free):
            raise OutOfBlocks(n, len(self._free))
        free = self._free
        out = free[len(free) - n:][::-1] if n else []
        del free[len(free) - n:]
        refcounts = self._refcounts
        for b in out:
            refcounts[b] = 1
        return out

    def incref(self, blocks: Sequence[int]) -> None:
        """Add one reference to each listed block (fork, prefix-cache insert). All must be in use."""
        for b in blocks:
            self._check_id(b)
            if self._refcounts[b] == 0:
                raise InvalidParameterError(
                    "blocks", list(blocks), f"block {b} is free (refcount 0); only blocks in use "
                    "can be shared")
        refcounts = self._refcounts
        for b in blocks:
            refcounts[b] += 1

    def free(self, blocks: Sequence[int]) -> None:
        """Drop one reference per listed block; a block reaching refcount 0 joins the free list."""
        counts = Counter(blocks)
        for b, k in counts.items():
            self._check_id(b)
            if k > self._refcounts[b]:
                raise InvalidParameterError(
                    "blocks", list(blocks), f"block {b} freed {k} time(s) but holds "
                    f"{self._refcounts[b]} reference(s) (double free?)")
        refcounts, free = self._refcounts, self._free
        for b in blocks:
            refcounts[b] -= 1
            if refcounts[b] == 0:
                free.append(b)

    def copy_on_write(self, block: int) -> tuple[int, bool]:
        """Make ``block`` safe to write for one holder.

        If ``refcount(block) > 1``: allocate a new block (refcount 1), drop the caller's reference
        to the old one, return ``(new, True)`` — the caller must copy the KV data old -> new and
        use ``new`` in its block table. Otherwise return ``(block, False)``: the caller is the only
        holder. Raises :class:`OutOfBlocks` (changing nothing) when a copy is needed and no block
        is free.
        """
        self._check_id(block)
        rc = self._refcounts[block]
        if rc == 0:
            raise InvalidParameterError("block", block, "is free (refcount 0); cannot write it")
        if rc == 1:
            return block, False
        if not self._free:
            raise OutOfBlocks(1, 0)
        new = self._free.pop()
        self._refcounts[new] = 1
        self._refcounts[block] = rc - 1
        return new, True

    # -- invariants ------------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Raise :class:`IntegrityError` unless: refcounts are >= 0; the free list holds each
        block at most once and exactly the blocks with refcount 0."""
        refcounts = self._refcounts
        if len(refcounts) != self.num_blocks:
            raise IntegrityError(f"{len(refcounts)} refcounts for {self.num_blocks} blocks")
        free_set = set(self._free)
        if len(free_set) != len(self._free):
            dups = [b for b, k in Counter(self._free).items() if k > 1]
            raise IntegrityError(f"blocks on the free list more than once: {dups[:20]}")
        for b, rc in enumerate(refcounts):
            if rc < 0:
                raise IntegrityError(f"block {b} has negative refcount {rc}")
            if (rc == 0) != (b in free_set):
                where = "on" if b in free_set else "not on"
                raise IntegrityError(f"block {b} has refcount {rc} but is {where} the free list")
        if not free_set <= set(range(self.num_blocks)):
            raise IntegrityError(f"free list holds unknown ids: {sorted(free_set)[:20]}")

    def _check_id(self, block: object) -> None:
        if not isinstance(block, int) or isinstance(block, bool) \
                or not 0 <= block < self.num_blocks:
            raise InvalidParameterError(
                "block", block, f"must be a block id in [0, {self.num_blocks})")

    def __repr__(self) -> str:
        return (f"BlockManager(num_blocks={self.num_blocks}, block_size={self.block_size}, "
                f"free={len(self._free)})")
