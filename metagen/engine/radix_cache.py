"""Radix-tree prefix cache over token ids, at KV-block granularity.

Every request — and every step of a search (``prompt + steps so far``) — starts by matching its
tokens here, so only the uncached suffix is prefilled (RadixAttention, Zheng et al. 2024,
"SGLang: Efficient Execution of Structured Language Model Programs"). Unlike a token-level radix
tree, every edge holds a whole number of blocks (``len(key) == len(blocks)``, each key element
the ``block_size`` token ids of one block), so a cached block is always full and can be shared
read-only by any sequence whose prefix it matches; the partial last block of a sequence is never
cached (as in vLLM's hashed full-block prefix caching).

Ownership: the cache holds exactly one reference (:meth:`BlockManager.incref`) on every block it
stores. :meth:`RadixCache.match` takes no reference; the caller increfs the blocks it uses, and
locks the matched node while it runs so that eviction cannot drop the cached path it relies on.

Eviction is LRU over unlocked leaves, trimming a leaf from its tail one block at a time, so the
cache frees exactly what is asked (when it can) and keeps the rest of the prefix. Access times are
a logical clock, so eviction order is deterministic.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count

from metagen.engine.block_manager import BlockManager, IntegrityError
from metagen.errors import InvalidParameterError

BlockKey = tuple[int, ...]  # the block_size token ids of one block


class RadixNode:
    """One edge of the tree (the edge from ``parent`` to this node) and its cached blocks.

    ``key[i]`` holds the token ids of block ``blocks[i]``. ``lock_ref`` counts the locks held on
    this node or any descendant (``direct_locks`` + sum of the children's ``lock_ref``); a node
    with ``lock_ref > 0`` is never evicted. A node reference stays valid while it is locked; an
    unlocked node may be trimmed or removed by :meth:`RadixCache.evict`.
    """

    __slots__ = ("key", "blocks", "parent", "children", "lock_ref", "direct_locks",
                 "last_access", "id")

    def __init__(self, key: list[BlockKey], blocks: list[int], parent: RadixNode | None,
                 node_id: int, last_access: int) -> None:
        self.key = key
        self.blocks = blocks
        self.parent = parent
        self.children: dict[BlockKey, RadixNode] = {}
        self.lock_ref = 0
        self.direct_locks = 0
        self.last_access = last_access
        self.id = node_id

    def __repr__(self) -> str:
        return (f"RadixNode(id={self.id}, blocks={self.blocks[:8]}"
                f"{'...' if len(self.blocks) > 8 else ''}, lock_ref={self.lock_ref})")


@dataclass(slots=True)
class MatchResult:
    """The longest cached prefix: ``blocks`` hold ``tokens[:num_tokens]``; ``node`` ends it.

    ``num_tokens == len(blocks) * block_size``. With no match, ``blocks == []`` and ``node`` is
    the root (locking the root is a no-op).
    """

    blocks: list[int]
    num_tokens: int
    node: RadixNode


class RadixCache:
    """Radix tree over token ids at block granularity: every edge holds a whole number of
    blocks (``len(tokens) == len(blocks) * block_size``) so cached KV blocks can be shared
    read-only. The cache holds one reference (``BlockManager.incref``) on every block it stores.

    Single-threaded, like the engine loop that owns it. ``match`` and ``insert`` may split an
    edge at a block boundary; a split keeps the original node object as the lower half, so a
    node the caller holds (and has locked) still ends the same prefix.
    """

    def __init__(self, block_manager: BlockManager) -> None:
        if not isinstance(block_manager, BlockManager):
            raise InvalidParameterError("block_manager", block_manager, "must be a BlockManager")
        self.block_manager = block_manager
        self.block_size = block_manager.block_size
        self._ids = count()
        self._clock = 0
        self._root = RadixNode([], [], None, next(self._ids), 0)
        self._num_cached = 0
        self._num_evictable = 0  # blocks in non-root nodes with lock_ref == 0
        self._owner: dict[int, RadixNode] = {}  # block id -> the node that stores it

    # -- queries ---------------------------------------------------------------------------

    @property
    def root(self) -> RadixNode:
        return self._root

    @property
    def num_cached_blocks(self) -> int:
        """Blocks stored in the tree (each holds one cache reference)."""
        return self._num_cached

    @property
    def evictable_blocks(self) -> int:
        """Cached blocks in unlocked nodes. Evicting them all frees those whose only reference is
        the cache's; blocks a running sequence still holds stay allocated."""
        return self._num_evictable

    def cached_blocks(self) -> list[int]:
        """Every block id stored in the tree (no order promised)."""
        return list(self._owner)

    def match(self, tokens: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``tokens`` in whole blocks.

        Touches the LRU clock of every node on the path and splits an edge when the match ends
        inside it (so ``node`` ends exactly at ``num_tokens``). Takes no block reference: the
        caller increfs the blocks it keeps and/or locks ``node`` while it uses them.
        """
        keys = self._block_keys(tokens, len(tokens) // self.block_size)
        now = self._tick()
        node, i, blocks = self._root, 0, []
        node.last_access = now
        while i < len(keys):
            child = node.children.get(keys[i])
            if child is None:
                break
            k = self._common(child.key, keys, i)
            if k < len(child.key):
                child = self._split(child, k)
            child.last_access = now
            blocks.extend(child.blocks)
            node, i = child, i + k
        return MatchResult(blocks, i * self.block_size, node)

    # -- mutations -------------------------------------------------------------------------

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Cache ``tokens[:len(blocks) * block_size]`` with their KV ``blocks``.

        Only the part not already cached is added, and the cache increfs exactly those blocks.
        Where the tree already has a block for the same tokens the caller's (duplicate) block is
        not taken — the caller keeps and eventually frees its own reference, or switches to the
        cached block (found by :meth:`match`). Returns the number of newly cached tokens.

        Raises :class:`~metagen.errors.InvalidParameterError` when ``tokens`` is shorter than
        the blocks cover, or when a block to be added is free or already cached for another
        prefix (one block cannot hold two different KV contents: a missing copy-on-write).
        """
        n = len(blocks)
        if len(tokens) < n * self.block_size:
            raise InvalidParameterError(
                "tokens", f"<{len(tokens)} tokens>",
                f"must cover the {n} blocks given ({n * self.block_size} tokens)")
        keys = self._block_keys(tokens, n)
        now = self._tick()
        node, i = self._root, 0
        node.last_access = now
        while i < n:
            child = node.children.get(keys[i])
            if child is None:
                break
            k = self._common(child.key, keys, i)
            if k < len(child.key):
                child = self._split(child, k)
            child.last_access = now
            node, i = child, i + k
        if i == n:
            return 0
        new_blocks = list(blocks[i:])
        self._check_new_blocks(new_blocks, blocks)
        self.block_manager.incref(new_blocks)
        leaf = RadixNode(keys[i:], new_blocks, node, next(self._ids), now)
        node.children[keys[i]] = leaf
        for b in new_blocks:
            self._owner[b] = leaf
        self._num_cached += len(new_blocks)
        self._num_evictable += len(new_blocks)
        return len(new_blocks) * self.block_size

    def lock(self, node: RadixNode) -> None:
        """Make ``node`` and all its ancestors unevictable (``lock_ref += 1`` on the path).

        Locking the root is a no-op. Raises InvalidParameterError if ``node`` is no longer in
        the tree (evicted or reset).
        """
        self._check_live(node)
        if node is self._root:
            return
        node.direct_locks += 1
        while node is not self._root:
            if node.lock_ref == 0:
                self._num_evictable -= len(node.blocks)
            node.lock_ref += 1
            node = node.parent  # type: ignore[assignment]

    def unlock(self, node: RadixNode) -> None:
        """Undo one :meth:`lock` of ``node``. Raises InvalidParameterError if it holds none."""
        self._check_live(node)
        if node is self._root:
            return
        if node.direct_locks == 0:
            raise InvalidParameterError("node", node, "is not locked (unlock without lock)")
        node.direct_locks -= 1
        while node is not self._root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._num_evictable += len(node.blocks)
            node = node.parent  # type: ignore[assignment]

    def evict(self, num_blocks: int) -> int:
        """Free up to ``num_blocks`` blocks, least recently used unlocked leaves first.

        A leaf is trimmed from its tail one block at a time; a leaf emptied is removed, and a
        parent that becomes an unlocked leaf joins the candidates. A block counts as freed only
        when the cache's reference was its last (it returned to the free list); blocks still
        held by a running sequence leave the cache without counting, and eviction continues
        until ``num_blocks`` are freed or nothing evictable is left. Returns the number freed.
        """
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 0:
            raise InvalidParameterError("num_blocks", num_blocks, "must be a non-negative integer")
        if num_blocks == 0 or self._num_evictable == 0:
            return 0
        heap = [(n.last_access, n.id, n) for n in self._nodes()
                if not n.children and n.lock_ref == 0 and n is not self._root]
        heapq.heapify(heap)
        bm, freed = self.block_manager, 0
        while heap and freed < num_blocks:
            _, _, node = heapq.heappop(heap)
            first = node.key[0]
            while node.blocks and freed < num_blocks:
                b = node.blocks.pop()
                node.key.pop()
                del self._owner[b]
                self._num_cached -= 1
                self._num_evictable -= 1
                bm.free((b,))
                if bm.refcount(b) == 0:
                    freed += 1
            if node.blocks:
                break
            parent = node.parent
            assert parent is not None
            del parent.children[first]
            node.parent = None
            if parent is not self._root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, parent.id, parent))
        return freed

    def reset(self) -> None:
        """Drop the whole tree, releasing the cache's reference on every block.

        Raises InvalidParameterError if any node is locked (unlock first: a running sequence
        relies on it). Node references from before the reset become invalid.
        """
        if self._root.children and any(c.lock_ref for c in self._root.children.values()):
            locked = sum(c.lock_ref for c in self._root.children.values())
            raise InvalidParameterError("reset", f"{locked} lock(s) held",
                                        "unlock every node before resetting the cache")
        if self._owner:
            self.block_manager.free(list(self._owner))
        for n in self._nodes():
            n.parent = None
        self._root = RadixNode([], [], None, next(self._ids), self._clock)
        self._owner.clear()
        self._num_cached = 0
        self._num_evictable = 0

    # -- invariants ------------------------------------------------------------------------

    def check_integrity(self) -> None:
        """Raise :class:`~metagen.engine.block_manager.IntegrityError` unless every invariant
        holds: edges are non-empty whole blocks of ``block_size`` tokens; children are keyed by
        their first block's tokens and point back to their parent; ``lock_ref == direct_locks +
        sum(children lock_ref)`` and is >= 0; a parent is accessed no earlier than its children;
        each cached block is stored once, has refcount >= 1, and the counters match the tree.
        Also checks the block manager."""
        bs, root = self.block_size, self._root
        if root.parent is not None or root.key or root.blocks or root.lock_ref or root.direct_locks:
            raise IntegrityError(f"malformed root {root!r}")
        seen: dict[int, RadixNode] = {}
        evictable = 0
        for node in self._nodes():
            for key, child in node.children.items():
                if child.parent is not node:
                    raise IntegrityError(f"{child!r} does not point back to its parent")
                if not child.key or len(child.key) != len(child.blocks):
                    raise IntegrityError(f"{child!r}: {len(child.key)} key blocks for "
                                         f"{len(child.blocks)} KV blocks")
                if child.key[0] != key:
                    raise IntegrityError(f"{child!r} keyed by {key}, first block {child.key[0]}")
                if child.last_access > node.last_access:
                    raise IntegrityError(f"{child!r} accessed after its parent {node!r}")
            if node is root:
                continue
            for k in node.key:
                if not isinstance(k, tuple) or len(k) != bs:
                    raise IntegrityError(f"{node!r}: key block {k!r} is not {bs} tokens")
            locks = node.direct_locks + sum(c.lock_ref for c in node.children.values())
            if node.lock_ref != locks or node.direct_locks < 0:
                raise IntegrityError(f"{node!r}: lock_ref {node.lock_ref} != {locks}")
            if node.lock_ref == 0:
                evictable += len(node.blocks)
            for b in node.blocks:
                if b in seen:
                    raise IntegrityError(f"block {b} cached twice ({seen[b]!r}, {node!r})")
                seen[b] = node
                if self._owner.get(b) is not node:
                    raise IntegrityError(f"block {b}: owner map says {self._owner.get(b)!r}")
                if self.block_manager.refcount(b) < 1:
                    raise IntegrityError(f"cached block {b} has refcount 0")
        if len(seen) != len(self._owner) or len(seen) != self._num_cached:
            raise IntegrityError(f"{len(seen)} blocks in the tree, owner map {len(self._owner)},"
                                 f" counter {self._num_cached}")
        if evictable != self._num_evictable:
            raise IntegrityError(f"{evictable} evictable blocks, counter {self._num_evictable}")
        self.block_manager.check_integrity()

    # -- internals -------------------------------------------------------------------------

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _block_keys(self, tokens: Sequence[int], n: int) -> list[BlockKey]:
        bs = self.block_size
        t = tuple(tokens[: n * bs])
        return [t[j:j + bs] for j in range(0, n * bs, bs)]

    @staticmethod
    def _common(edge: list[BlockKey], keys: list[BlockKey], start: int) -> int:
        """Number of leading blocks of ``edge`` equal to ``keys[start:]`` (>= 1 by lookup)."""
        k, limit = 1, min(len(edge), len(keys) - start)
        while k < limit and edge[k] == keys[start + k]:
            k += 1
        return k

    def _split(self, child: RadixNode, k: int) -> RadixNode:
        """Split ``child``'s edge after ``k`` blocks; return the new upper node.

        ``child`` keeps the lower part (and its identity, locks and children); the new node gets
        ``child``'s lock_ref (all of its locks come from ``child``'s subtree) and access time.
        """
        parent = child.parent
        assert parent is not None and 0 < k < len(child.key)
        upper = RadixNode(child.key[:k], child.blocks[:k], parent, next(self._ids),
                          child.last_access)
        upper.lock_ref = child.lock_ref
        upper.children[child.key[k]] = child
        parent.children[child.key[0]] = upper
        for b in upper.blocks:
            self._owner[b] = upper
        child.key = child.key[k:]
        child.blocks = child.blocks[k:]
        child.parent = upper
        return upper

    def _check_new_blocks(self, new_blocks: list[int], blocks: Sequence[int]) -> None:
        seen: set[int] = set()
        for b in new_blocks:
            if b in self._owner or b in seen:
                raise InvalidParameterError(
                    "blocks", list(blocks), f"block {b} is already cached for another prefix "
                    "(copy-on-write missing?)")
            seen.add(b)
            if self.block_manager.refcount(b) < 1:
                raise InvalidParameterError("blocks", list(blocks), f"block {b} is free")

    def _check_live(self, node: RadixNode) -> None:
        if not isinstance(node, RadixNode):
            raise InvalidParameterError("node", node, "must be a RadixNode from match()")
        top = node
        while top.parent is not None:
            top = top.parent
        if top is not self._root:
            raise InvalidParameterError("node", node, "is no longer in the cache (evicted or "
                                        "reset); lock a node right after match()")

    def _nodes(self) -> Iterator[RadixNode]:
        stack = [self._root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())
