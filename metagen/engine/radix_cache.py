"""Radix-tree prefix cache over token ids, at KV-block granularity.

Every request — and every step of a search (``prompt + steps so far``) — starts by matching its
tokens here, so only the uncached suffix is prefilled (RadixAttention: Zheng et al. 2024, "SGLang:
Efficient Execution of Structured Language Model Programs"). Every edge holds a whole number of
blocks (each key element is the ``block_size`` token ids of one block), so a cached block is
always full and can be shared read-only. A finished sequence's partial last block is kept
apart, in :attr:`RadixCache.tails` (:class:`~metagen.engine.tail_cache.TailCache`, keyed by its
tokens and the whole-block prefix before it): the tree and the tails together are the prefix
cache, whose blocks :meth:`cached_blocks` lists and :meth:`evict` frees (tails first).

Ownership: the cache holds exactly one reference (``BlockManager.incref``) on every block it
stores. ``match`` takes none: the caller increfs the blocks it uses and/or locks the matched node
so that eviction keeps the cached path. Eviction is LRU over unlocked leaves, trimming a leaf from
its tail block by block, so it frees what is asked and keeps the rest of the prefix. Access times
come from a logical clock: eviction order is deterministic. Candidate leaves sit in a lazily
updated heap, so ``evict(k)`` costs O(k log n), not a walk of the tree.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import count

from metagen.engine.block_manager import BlockManager, IntegrityError
from metagen.engine.tail_cache import TailCache
from metagen.errors import InvalidParameterError

BlockKey = tuple[int, ...]  # the block_size token ids of one block


class RadixNode:
    """The edge from ``parent`` to this node: ``key[i]`` holds the token ids of ``blocks[i]``.

    ``lock_ref`` counts the locks held on this node or below it (``direct_locks`` + the children's
    ``lock_ref``); a node with ``lock_ref > 0`` is never evicted. A node reference stays valid while
    locked; an unlocked node may be trimmed or removed by eviction (``parent`` becomes ``None``).
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
        more = "..." if len(self.blocks) > 8 else ""
        return f"RadixNode(id={self.id}, blocks={self.blocks[:8]}{more}, lock_ref={self.lock_ref})"


@dataclass(slots=True)
class MatchResult:
    """The longest cached prefix: ``blocks`` hold ``tokens[:num_tokens]``, ``node`` ends it.

    ``num_tokens == len(blocks) * block_size``; with no match ``blocks == []`` and ``node`` is the
    root (locking it is a no-op).
    """

    blocks: list[int]
    num_tokens: int
    node: RadixNode


class RadixCache:
    """Radix tree over token ids at block granularity: every edge holds a whole number of
    blocks (``len(tokens) == len(blocks) * block_size``) so cached KV blocks can be shared
    read-only. The cache holds one reference (``BlockManager.incref``) on every block it stores.

    Single-threaded, like the engine loop that owns it. ``match`` and ``insert`` may split an edge
    at a block boundary; the original node object keeps the lower half, so a node the caller holds
    still ends the same prefix. Tip: match ``tokens[:-1]`` when the last token's logits are needed.
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
        # (last_access, id, node) for every unlocked leaf, plus stale entries skipped on pop
        self._heap: list[tuple[int, int, RadixNode]] = []
        self._heap_slack = 64  # entries allowed beyond 4 per cached block before a rebuild
        # at most a quarter of the blocks, so that kept tails never crowd out running sequences
        self.tails = TailCache(block_manager, block_manager.num_blocks // 4)

    @property
    def root(self) -> RadixNode:
        return self._root

    @property
    def num_cached_blocks(self) -> int:
        """Blocks stored in the tree and the tails (each holds one cache reference)."""
        return self._num_cached + len(self.tails)

    @property
    def evictable_blocks(self) -> int:
        """Cached blocks in unlocked nodes. Evicting them frees those whose only reference is the
        cache's; blocks a running sequence still holds stay allocated. Tails are never locked."""
        return self._num_evictable + len(self.tails)

    def cached_blocks(self) -> list[int]:
        """Every block id stored in the tree or the tails, once per cache reference (no order
        promised)."""
        return list(self._owner) + self.tails.blocks()

    def match(self, tokens: Sequence[int]) -> MatchResult:
        """Longest cached prefix of ``tokens`` in whole blocks. Touches the LRU clock along the
        path and splits an edge the match ends inside. Takes no block reference."""
        keys = self._block_keys(tokens, len(tokens) // self.block_size)
        node, i, blocks = self._walk(keys)
        return MatchResult(blocks, i * self.block_size, node)

    def insert(self, tokens: Sequence[int], blocks: Sequence[int]) -> int:
        """Cache ``tokens[:len(blocks) * block_size]`` with their KV ``blocks``; return the number
        of newly cached tokens.

        Only the part not yet cached is added, and the cache increfs exactly those blocks. Where
        the tree already has a block for the same tokens, the caller's duplicate is not taken: the
        caller keeps (and later frees) its reference, or switches to the cached block.
        Raises InvalidParameterError (after at most splitting an edge) when ``tokens`` is shorter
        than the blocks, or a block to add is free or cached for another prefix (one block cannot
        hold two KV contents: a missing copy-on-write).
        """
        n = len(blocks)
        if len(tokens) < n * self.block_size:
            raise InvalidParameterError("tokens", f"<{len(tokens)} tokens>",
                                        f"must cover the {n} blocks given ({n} * block_size)")
        keys = self._block_keys(tokens, n)
        node, i, _ = self._walk(keys)
        if i == n:
            return 0
        new_blocks = list(blocks[i:])
        clash = [b for b in new_blocks if b in self._owner]
        if clash or len(set(new_blocks)) != len(new_blocks):
            raise InvalidParameterError("blocks", list(blocks), f"blocks {clash or new_blocks} "
                                        "would be cached twice (copy-on-write missing?)")
        self.block_manager.incref(new_blocks)  # raises if a block is free
        leaf = RadixNode(keys[i:], new_blocks, node, next(self._ids), self._clock)
        node.children[keys[i]] = leaf
        for b in new_blocks:
            self._owner[b] = leaf
        self._num_cached += len(new_blocks)
        self._num_evictable += len(new_blocks)
        self._push(leaf)
        return len(new_blocks) * self.block_size

    def lock(self, node: RadixNode) -> None:
        """Make ``node`` and its ancestors unevictable (``lock_ref += 1`` along the path). The
        root is a no-op. Raises InvalidParameterError for a node no longer in the tree."""
        self._check_live(node)
        if node is not self._root:
            node.direct_locks += 1
            self._add_lock_ref(node, 1)

    def unlock(self, node: RadixNode) -> None:
        """Undo one ``lock(node)``. Raises InvalidParameterError if ``node`` holds no lock."""
        self._check_live(node)
        if node is self._root:
            return
        if node.direct_locks == 0:
            raise InvalidParameterError("node", node, "is not locked (unlock without lock)")
        node.direct_locks -= 1
        self._add_lock_ref(node, -1)
        self._push(node)  # a leaf whose last lock went is a candidate again

    def evict(self, num_blocks: int) -> int:
        """Free up to ``num_blocks`` blocks: kept tails first (each is less than a block of
        tokens to recompute), then least recently used unlocked leaves; return how many were
        freed.

        A leaf is trimmed from its tail; an emptied leaf is removed and a parent that becomes an
        unlocked leaf joins the candidates. A block counts as freed only if the cache's reference
        was its last (it returned to the free list): blocks a running sequence holds leave the
        cache without counting, and eviction goes on until ``num_blocks`` are freed or nothing
        evictable is left.
        """
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 0:
            raise InvalidParameterError("num_blocks", num_blocks, "must be a non-negative integer")
        bm, freed = self.block_manager, self.tails.evict(num_blocks)
        while freed < num_blocks and self._num_evictable and self._heap:
            stamp, _, node = heapq.heappop(self._heap)
            if not self._is_candidate(node) or stamp != node.last_access:
                continue  # stale entry
            first, released = node.key[0], []
            while node.blocks and freed < num_blocks:
                b = node.blocks.pop()
                node.key.pop()
                del self._owner[b]
                released.append(b)
                freed += bm.refcount(b) == 1  # the cache's reference is the last one
            bm.free(released)
            self._num_cached -= len(released)
            self._num_evictable -= len(released)
            if node.blocks:
                self._push(node)  # trimmed, still a candidate
                break
            parent = node.parent
            assert parent is not None
            del parent.children[first]
            node.parent = None
            self._push(parent)
        return freed

    def reset(self) -> None:
        """Drop the whole tree, releasing the cache's reference on every block. Raises
        InvalidParameterError while any node is locked. Older node references become invalid."""
        locked = sum(c.lock_ref for c in self._root.children.values())
        if locked:
            raise InvalidParameterError("reset", f"{locked} lock(s) held",
                                        "unlock every node before resetting the cache")
        self.tails.clear()
        self.block_manager.free(list(self._owner))
        for n in self._nodes():
            n.parent = None
        self._root = RadixNode([], [], None, next(self._ids), self._clock)
        self._owner.clear()
        self._heap.clear()
        self._num_cached = self._num_evictable = 0

    def check_integrity(self) -> None:
        """Raise IntegrityError unless: edges are non-empty whole blocks of ``block_size`` tokens;
        children are keyed by their first block and point back to their parent; ``lock_ref ==
        direct_locks + sum(children lock_ref)``; a parent is accessed no earlier than its children;
        every unlocked leaf is in the eviction heap; each cached block is stored once with refcount
        >= 1 (kept tails too); the counters match the tree. Then checks the block manager."""
        bs, root = self.block_size, self._root
        if root.parent is not None or root.key or root.blocks or root.lock_ref or root.direct_locks:
            raise IntegrityError(f"malformed root {root!r}")
        queued = {(s, n.id) for s, _, n in self._heap}
        seen: set[int] = set()
        evictable = 0
        for node in self._nodes():
            for key, child in node.children.items():
                if child.parent is not node or not child.key or child.key[0] != key:
                    raise IntegrityError(f"{child!r} misplaced under {node!r} as {key}")
                if child.last_access > node.last_access:
                    raise IntegrityError(f"{child!r} accessed after its parent {node!r}")
            if node is root:
                continue
            if len(node.key) != len(node.blocks) or any(len(k) != bs for k in node.key):
                raise IntegrityError(f"{node!r}: key {node.key} is not one {bs}-token tuple per "
                                     "block")
            locks = node.direct_locks + sum(c.lock_ref for c in node.children.values())
            if node.lock_ref != locks or node.direct_locks < 0:
                raise IntegrityError(f"{node!r}: lock_ref {node.lock_ref} != {locks}")
            evictable += len(node.blocks) if node.lock_ref == 0 else 0
            if self._is_candidate(node) and (node.last_access, node.id) not in queued:
                raise IntegrityError(f"unlocked leaf {node!r} is not in the eviction heap")
            for b in node.blocks:
                if b in seen or self._owner.get(b) is not node:
                    raise IntegrityError(f"block {b} cached twice or misfiled ({node!r})")
                seen.add(b)
                if self.block_manager.refcount(b) < 1:
                    raise IntegrityError(f"cached block {b} has refcount 0")
        if len(seen) != len(self._owner) or len(seen) != self._num_cached:
            raise IntegrityError(f"{len(seen)} blocks in the tree, {len(self._owner)} in the owner"
                                 f" map, counter {self._num_cached}")
        if evictable != self._num_evictable:
            raise IntegrityError(f"{evictable} evictable blocks, counter {self._num_evictable}")
        for b in self.tails.blocks():
            if self.block_manager.refcount(b) < 1:
                raise IntegrityError(f"kept tail block {b} has refcount 0")
        self.block_manager.check_integrity()

    # -- internals -------------------------------------------------------------------------

    def _block_keys(self, tokens: Sequence[int], n: int) -> list[BlockKey]:
        bs = self.block_size
        if isinstance(tokens, (list, tuple)):
            t = tuple(tokens[: n * bs])
        else:  # arrays/tensors: plain ints, so keys hash by value
            t = tuple(int(x) for x in tokens[: n * bs])
        return [t[j:j + bs] for j in range(0, n * bs, bs)]

    def _walk(self, keys: list[BlockKey]) -> tuple[RadixNode, int, list[int]]:
        """Follow ``keys`` down from the root, touching each node and splitting the edge where
        the path ends inside it; return (last node, blocks matched, their block ids)."""
        self._clock += 1
        now, node, i, blocks = self._clock, self._root, 0, []
        node.last_access = now
        while i < len(keys):
            child = node.children.get(keys[i])
            if child is None:
                break
            edge, k = child.key, 1
            limit = min(len(edge), len(keys) - i)
            while k < limit and edge[k] == keys[i + k]:
                k += 1
            if k < len(edge):
                child = self._split(child, k)
            child.last_access = now
            blocks.extend(child.blocks)
            node, i = child, i + k
        self._push(node)  # its access time changed
        return node, i, blocks

    def _split(self, child: RadixNode, k: int) -> RadixNode:
        """Split ``child``'s edge after ``k`` blocks; return the new upper node, which takes
        ``child``'s lock_ref (all its locks come from ``child``'s subtree) and access time."""
        parent = child.parent
        assert parent is not None and 0 < k < len(child.key)
        upper = RadixNode(child.key[:k], child.blocks[:k], parent, next(self._ids),
                          child.last_access)
        upper.lock_ref = child.lock_ref
        upper.children[child.key[k]] = child
        parent.children[child.key[0]] = upper
        for b in upper.blocks:
            self._owner[b] = upper
        child.key, child.blocks, child.parent = child.key[k:], child.blocks[k:], upper
        return upper

    def _add_lock_ref(self, node: RadixNode, delta: int) -> None:
        """Add ``delta`` to ``lock_ref`` from ``node`` up to (not including) the root."""
        while node is not self._root:
            if node.lock_ref == 0:
                self._num_evictable -= len(node.blocks)
            node.lock_ref += delta
            if node.lock_ref == 0:
                self._num_evictable += len(node.blocks)
            node = node.parent  # type: ignore[assignment]

    def _is_candidate(self, node: RadixNode) -> bool:
        """An unlocked leaf still in the tree."""
        return (node.parent is not None and not node.children and node.lock_ref == 0
                and node is not self._root)

    def _push(self, node: RadixNode) -> None:
        if self._is_candidate(node):
            heapq.heappush(self._heap, (node.last_access, node.id, node))
            if len(self._heap) > self._heap_slack + 4 * self._num_cached:  # mostly stale
                self._heap = [(n.last_access, n.id, n) for n in self._nodes()
                              if self._is_candidate(n)]
                heapq.heapify(self._heap)

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
