"""RadixCache: hand-written cases, then a hypothesis state machine over the cache and the block
manager together, checked against an independent oracle (a dict from cached block-prefix to
block) and a shadow of each block's KV content."""

from __future__ import annotations

import pytest

from metagen.engine.block_manager import BlockManager, IntegrityError
from metagen.engine.radix_cache import RadixCache
from metagen.errors import InvalidParameterError

BS = 2


def make(num_blocks: int = 16) -> tuple[BlockManager, RadixCache]:
    bm = BlockManager(num_blocks, BS)
    return bm, RadixCache(bm)


def cache_seq(bm: BlockManager, rc: RadixCache, tokens: list[int]) -> list[int]:
    """Allocate blocks for the full blocks of ``tokens``, insert them, drop the caller's refs."""
    blocks = bm.allocate(len(tokens) // BS)
    rc.insert(tokens, blocks)
    bm.free(blocks)
    return blocks


def test_match_after_insert() -> None:
    bm, rc = make()
    blocks = bm.allocate(3)
    assert rc.insert([1, 2, 3, 4, 5, 6, 7], blocks) == 6
    assert rc.num_cached_blocks == 3 and all(bm.refcount(b) == 2 for b in blocks)
    m = rc.match([1, 2, 3, 4, 5, 6, 7, 8])
    assert (m.blocks, m.num_tokens) == (blocks, 6)
    assert rc.match([1, 2, 3, 4]).blocks == blocks[:2]
    assert rc.match([9, 2, 3, 4]).blocks == []
    assert rc.match([]).num_tokens == 0
    assert all(bm.refcount(b) == 2 for b in blocks)  # match takes no reference
    rc.check_integrity()


def test_partial_block_prefixes_are_not_matched() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2, 3, 4])
    assert rc.match([1]).num_tokens == 0  # shorter than one block
    assert rc.match([1, 2, 3]).num_tokens == 2  # the partial second block is not a match
    assert rc.match([1, 2, 3, 5]).num_tokens == 2  # diverges inside the second block
    assert rc.match([1, 3]).num_tokens == 0
    rc.check_integrity()


def test_insert_requires_tokens_covering_the_blocks() -> None:
    bm, rc = make()
    with pytest.raises(InvalidParameterError, match="tokens"):
        rc.insert([1, 2, 3], bm.allocate(2))


def test_split_edge_on_insert_and_match() -> None:
    bm, rc = make()
    a = cache_seq(bm, rc, [1, 2, 3, 4, 5, 6])
    b = bm.allocate(3)
    assert rc.insert([1, 2, 3, 4, 7, 8], b) == 2  # shares two blocks, adds one
    assert bm.refcount(b[2]) == 2 and bm.refcount(b[0]) == 1  # only the new block is taken
    assert rc.match([1, 2, 3, 4, 5, 6]).blocks == a
    assert rc.match([1, 2, 3, 4, 7, 8]).blocks == a[:2] + [b[2]]
    top = rc.root.children[(1, 2)]
    assert top.blocks == a[:2] and set(top.children) == {(5, 6), (7, 8)}
    # a match ending inside an edge splits it, so the node ends exactly at the match
    cache_seq(bm, rc, [9, 9, 8, 8, 7, 7])
    m = rc.match([9, 9, 8, 8, 0, 0])
    assert m.num_tokens == 4 and m.node.blocks == m.blocks
    rc.check_integrity()


def test_duplicate_insert_keeps_original_blocks() -> None:
    bm, rc = make()
    orig = cache_seq(bm, rc, [1, 2, 3, 4])
    dup = bm.allocate(2)
    assert rc.insert([1, 2, 3, 4], dup) == 0
    assert rc.match([1, 2, 3, 4]).blocks == orig
    assert [bm.refcount(b) for b in dup] == [1, 1]  # the caller's duplicates are not taken
    bm.free(dup)
    assert bm.num_free == 16 - 2
    rc.check_integrity()


def test_insert_rejects_block_cached_for_another_prefix() -> None:
    bm, rc = make()
    blocks = bm.allocate(2)
    rc.insert([1, 2, 3, 4], blocks)
    with pytest.raises(InvalidParameterError, match="copy-on-write"):
        rc.insert([1, 2, 5, 6], blocks)  # block 1 cannot hold both (3, 4) and (5, 6)
    with pytest.raises(InvalidParameterError, match="free"):
        rc.insert([7, 7], [15])
    rc.check_integrity()


def test_lock_prevents_eviction() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2, 3, 4])
    cache_seq(bm, rc, [5, 6, 7, 8])
    m = rc.match([1, 2, 3, 4])
    rc.lock(m.node)
    assert rc.evictable_blocks == 2
    assert rc.evict(10) == 2
    assert rc.match([1, 2, 3, 4]).blocks == m.blocks and rc.match([5, 6]).blocks == []
    assert rc.evict(10) == 0
    rc.unlock(m.node)
    assert rc.evictable_blocks == 2 and rc.evict(10) == 2
    assert bm.num_free == 16 and rc.num_cached_blocks == 0
    rc.check_integrity()


def test_lock_covers_ancestors_and_split_keeps_locks() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 1, 2, 2, 3, 3])
    deep = rc.match([1, 1, 2, 2, 3, 3])
    rc.lock(deep.node)
    rc.match([1, 1, 5, 5])  # splits the locked edge after one block
    rc.check_integrity()
    assert rc.evictable_blocks == 0 and rc.evict(5) == 0
    rc.unlock(deep.node)
    assert rc.evictable_blocks == 3
    with pytest.raises(InvalidParameterError, match="not locked"):
        rc.unlock(deep.node)
    rc.check_integrity()


def test_lru_order_and_trimming_from_the_tail() -> None:
    bm, rc = make()
    old = cache_seq(bm, rc, [1, 1, 2, 2])
    new = cache_seq(bm, rc, [3, 3, 4, 4])
    rc.match([1, 1, 2, 2])  # touches the first path: now the second one is least recently used
    assert rc.evict(1) == 1
    assert bm.refcount(new[1]) == 0  # the tail block of the LRU leaf went first
    assert rc.match([3, 3, 4, 4]).blocks == new[:1]  # this match makes it the most recent
    assert rc.evict(2) == 2  # so now the first path goes, tail first
    assert rc.match([1, 1, 2, 2]).blocks == [] and bm.refcount(old[0]) == 0
    assert rc.match([3, 3]).blocks == new[:1]
    # LRU is per block: matching only a prefix splits the edge and leaves its tail older
    rc.reset()
    a = cache_seq(bm, rc, [1, 1, 2, 2])
    b = cache_seq(bm, rc, [3, 3])
    rc.match([1, 1])
    assert rc.evict(1) == 1 and bm.refcount(a[1]) == 0 and bm.refcount(b[0]) == 1
    rc.check_integrity()


def test_evict_counts_only_blocks_returned_to_the_free_list() -> None:
    bm, rc = make(8)
    running = bm.allocate(2)  # a running sequence still holds its blocks after caching them
    rc.insert([1, 2, 3, 4], running)
    idle = cache_seq(bm, rc, [5, 6, 7, 8])
    rc.match([1, 2, 3, 4])  # the running sequence's path is the most recent
    assert rc.evict(3) == 2  # frees idle's two; running's leave the cache but stay allocated
    assert rc.num_cached_blocks == 0 and rc.evictable_blocks == 0
    assert [bm.refcount(b) for b in running] == [1, 1] and bm.refcount(idle[0]) == 0
    rc.check_integrity()


def test_evicted_node_cannot_be_locked() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2])
    m = rc.match([1, 2])
    rc.evict(1)
    with pytest.raises(InvalidParameterError, match="no longer in the cache"):
        rc.lock(m.node)


def test_reset_releases_everything() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2, 3, 4])
    m = rc.match([1, 2])
    rc.lock(m.node)
    with pytest.raises(InvalidParameterError, match="unlock"):
        rc.reset()
    rc.unlock(m.node)
    rc.reset()
    assert bm.num_free == 16 and rc.num_cached_blocks == 0 and rc.match([1, 2]).blocks == []
    with pytest.raises(InvalidParameterError):
        rc.lock(m.node)
    rc.check_integrity()


def test_root_match_lock_is_noop_and_evict_validates() -> None:
    bm, rc = make()
    m = rc.match([5, 5, 5])
    assert m.node is rc.root and m.blocks == []
    rc.lock(m.node)
    rc.unlock(m.node)
    with pytest.raises(InvalidParameterError, match="num_blocks"):
        rc.evict(-1)
    assert rc.evict(0) == 0
    rc.check_integrity()


def test_check_integrity_detects_corruption() -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2, 3, 4])
    rc.root.children[(1, 2)].lock_ref = 1  # lock_ref without a lock
    with pytest.raises(IntegrityError, match="lock_ref"):
        rc.check_integrity()
