"""RadixCache: hand-written cases, then a hypothesis state machine over the cache and the block
manager together, checked against an independent oracle (a dict from cached block-prefix to
block) and a shadow of each block's KV content."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from metagen.engine.block_manager import BlockManager, IntegrityError, OutOfBlocks
from metagen.engine.radix_cache import RadixCache, RadixNode
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


def test_token_arrays_and_tensors_match_like_lists() -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    bm, rc = make()
    blocks = cache_seq(bm, rc, [1, 2, 3, 4])
    assert rc.match(np.array([1, 2, 3, 4, 5])).blocks == blocks
    assert rc.match(torch.tensor([1, 2, 3, 4, 5])).blocks == blocks  # 0-d tensors hash by id
    assert rc.insert(torch.tensor([1, 2, 3, 4]), blocks) == 0
    rc.check_integrity()


def _corrupt_lock(rc: RadixCache) -> None:
    rc.root.children[(1, 2)].lock_ref = 1  # a lock_ref without a lock


def _corrupt_key(rc: RadixCache) -> None:
    rc.root.children[(1, 2)].key[0] = (9, 9)  # filed under (1, 2) but starts with (9, 9)


def _corrupt_access(rc: RadixCache) -> None:
    rc.root.children[(1, 2)].last_access = 10**6  # a child newer than its parent


def _corrupt_heap(rc: RadixCache) -> None:
    rc._heap.clear()  # an unlocked leaf that eviction can no longer find


def _corrupt_counter(rc: RadixCache) -> None:
    rc._num_evictable += 1


def _corrupt_refcount(rc: RadixCache) -> None:
    rc.block_manager._refcounts[rc.cached_blocks()[0]] = 0


@pytest.mark.parametrize("corrupt, message", [
    (_corrupt_lock, "lock_ref"), (_corrupt_key, "misplaced"), (_corrupt_access, "accessed after"),
    (_corrupt_heap, "eviction heap"), (_corrupt_counter, "evictable"),
    (_corrupt_refcount, "refcount 0")])
def test_check_integrity_detects_corruption(corrupt, message: str) -> None:
    bm, rc = make()
    cache_seq(bm, rc, [1, 2, 3, 4])
    rc.check_integrity()
    corrupt(rc)
    with pytest.raises(IntegrityError, match=message):
        rc.check_integrity()


# -- random operations over the cache and the block manager together ----------------------------

Prefix = tuple[tuple[int, ...], ...]
# Prompts: a cut of one of a few templates plus a random tail, over a 3-token alphabet, so that
# requests share prefixes of every length (edge splits, duplicate inserts, partial matches).
TEMPLATES = ([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2], [0, 1, 2, 0, 2, 2, 1, 1, 0, 0], [1] * 12)
TOKENS = st.builds(
    lambda t, cut, tail: TEMPLATES[t][:cut] + tail,
    st.integers(0, len(TEMPLATES) - 1), st.integers(0, 12),
    st.lists(st.integers(0, 2), max_size=4))
INDEX = st.integers(0, 1000)


@dataclass
class Seq:
    tokens: list[int]
    blocks: list[int]
    lock: RadixNode | None = None
    lock_prefix: Prefix = ()


@dataclass
class Lock:
    node: RadixNode
    prefix: Prefix = ()


class CacheMachine(RuleBasedStateMachine):
    """Engine-like use of both structures, checked against independent shadows:

    - ``oracle``: cached block-prefix -> block, updated by the rules of insert (the first block
      inserted for a prefix wins) and synced after eviction (which may only drop a suffix-closed
      set); ``stamp``: the logical time each prefix was last matched or inserted.
    - ``content``: the token ids written into each block (the stand-in for its KV data). A block
      is written only when its refcount is 1, so the content of every shared block stays what
      every holder expects.
    """

    def __init__(self) -> None:
        super().__init__()
        self.bm: BlockManager
        self.rc: RadixCache
        self.bs = 1
        self.seqs: list[Seq] = []
        self.locks: list[Lock] = []
        self.oracle: dict[Prefix, int] = {}
        self.stamp: dict[Prefix, int] = {}
        self.clock = 0
        self.content: dict[int, list[int]] = {}

    @initialize(bs=st.sampled_from([1, 2, 3]), num_blocks=st.integers(8, 32),
                heap_slack=st.sampled_from([-(10**9), 64]))
    def setup(self, bs: int, num_blocks: int, heap_slack: int) -> None:
        self.bs = bs
        self.bm = BlockManager(num_blocks, bs)
        self.rc = RadixCache(self.bm)
        self.rc._heap_slack = heap_slack  # negative: rebuild the eviction heap on every push

    # -- helpers ---------------------------------------------------------------------------

    def keys(self, tokens: list[int]) -> Prefix:
        bs = self.bs
        return tuple(tuple(tokens[j:j + bs]) for j in range(0, len(tokens) // bs * bs, bs))

    def checked_match(self, tokens: list[int]):
        keys = self.keys(tokens)
        expect = 0
        while expect < len(keys) and keys[:expect + 1] in self.oracle:
            expect += 1
        m = self.rc.match(tokens)
        assert m.blocks == [self.oracle[keys[:j + 1]] for j in range(expect)]
        assert m.num_tokens == expect * self.bs == len(m.blocks) * self.bs
        self.clock += 1
        for j in range(expect):
            self.stamp[keys[:j + 1]] = self.clock
        return m, keys[:expect]

    def locked_prefixes(self) -> set[Prefix]:
        out: set[Prefix] = set()
        for p in [s.lock_prefix for s in self.seqs if s.lock] + [lk.prefix for lk in self.locks]:
            out.update(p[:j + 1] for j in range(len(p)))
        return out

    def checked_evict(self, n: int) -> int:
        free, before = self.bm.num_free, dict(self.oracle)
        freed = self.rc.evict(n)
        assert 0 <= freed <= n and self.bm.num_free == free + freed
        if freed < n:
            assert self.rc.evictable_blocks == 0
        cached = set(self.rc.cached_blocks())
        self.oracle = {p: b for p, b in before.items() if b in cached}
        evicted = [p for p in before if p not in self.oracle]
        locked = self.locked_prefixes()
        assert not locked & set(evicted), "a locked prefix was evicted"
        assert all(p[:-1] in self.oracle or len(p) == 1 for p in self.oracle), "not prefix-closed"
        if evicted:  # LRU: every unlocked leaf left is no older than anything evicted
            newest_evicted = max(self.stamp[p] for p in evicted)
            parents = {p[:-1] for p in self.oracle}
            for p in self.oracle:
                if p not in parents and p not in locked:
                    assert self.stamp[p] >= newest_evicted
        for p in evicted:
            del self.stamp[p]
        return freed

    def take(self, n: int) -> list[int] | None:
        """Allocate n blocks, evicting from the cache if needed; None when memory is full."""
        if not self.bm.can_allocate(n):
            self.checked_evict(n - self.bm.num_free)
        if not self.bm.can_allocate(n):
            with pytest.raises(OutOfBlocks):
                self.bm.allocate(n)
            return None
        blocks = self.bm.allocate(n)
        for b in blocks:
            self.content[b] = []
        return blocks

    def write(self, seq: Seq, tokens: list[int]) -> None:
        for t in tokens:
            b = seq.blocks[len(seq.tokens) // self.bs]
            assert self.bm.refcount(b) == 1 and b not in self.rc.cached_blocks()
            self.content[b].append(t)
            seq.tokens.append(t)

    def release(self, seq: Seq) -> None:
        if seq.lock is not None:
            self.rc.unlock(seq.lock)
        self.bm.free(seq.blocks)

    def checked_insert(self, seq: Seq) -> None:
        full = len(seq.tokens) // self.bs
        keys = self.keys(seq.tokens)
        new = 0
        for j in range(full):
            if keys[:j + 1] not in self.oracle:
                self.oracle[keys[:j + 1]] = seq.blocks[j]
                new += 1
        assert self.rc.insert(seq.tokens, seq.blocks[:full]) == new * self.bs
        self.clock += 1
        for j in range(full):
            self.stamp[keys[:j + 1]] = self.clock

    # -- rules -----------------------------------------------------------------------------

    @precondition(lambda self: len(self.seqs) < 4)  # few live sequences: turnover fills the cache
    @rule(tokens=TOKENS, cache_prompt=st.booleans())
    def add_request(self, tokens: list[int], cache_prompt: bool) -> None:
        """Match, lock, allocate the rest (evicting if needed), prefill, maybe cache the prompt."""
        m, prefix = self.checked_match(tokens)
        self.bm.incref(m.blocks)
        self.rc.lock(m.node)
        seq = Seq(tokens[:m.num_tokens], list(m.blocks), m.node, prefix)
        more = self.take(self.bm.blocks_for(len(tokens)) - len(m.blocks))
        if more is None:
            self.release(seq)
            return
        seq.blocks += more
        self.write(seq, tokens[m.num_tokens:])
        self.seqs.append(seq)
        if cache_prompt:
            self.checked_insert(seq)

    @precondition(lambda self: self.seqs)
    @rule(i=INDEX, token=st.integers(0, 2))
    def decode(self, i: int, token: int) -> None:
        seq = self.seqs[i % len(self.seqs)]
        if len(seq.tokens) % self.bs == 0:  # the last block is full (or there is none)
            more = self.take(1)
            if more is None:
                return
            seq.blocks += more
        else:
            last = seq.blocks[-1]
            try:
                new, copied = self.bm.copy_on_write(last)
            except OutOfBlocks:
                if not self.checked_evict(1):
                    return
                new, copied = self.bm.copy_on_write(last)
            if copied:
                self.content[new] = list(self.content[last])
                seq.blocks[-1] = new
        self.write(seq, [token])

    @precondition(lambda self: 0 < len(self.seqs) < 6)
    @rule(i=INDEX)
    def fork(self, i: int) -> None:
        seq = self.seqs[i % len(self.seqs)]
        self.bm.incref(seq.blocks)
        self.seqs.append(Seq(list(seq.tokens), list(seq.blocks)))

    @precondition(lambda self: 0 < len(self.seqs) < 4)
    @rule(i=INDEX, tokens=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def sample_n(self, i: int, tokens: list[int]) -> None:
        """Parallel sampling: fork a sequence once per token and decode one token on each, so
        the forks copy their shared partial last block on write."""
        seq = self.seqs[i % len(self.seqs)]
        first = len(self.seqs)
        for _ in tokens:
            self.fork(self.seqs.index(seq))
        for j, t in enumerate(tokens):
            self.decode(first + j, t)

    @precondition(lambda self: self.seqs)
    @rule(i=INDEX, adopt=st.booleans())
    def cache(self, i: int, adopt: bool) -> None:
        """Insert a running sequence; with ``adopt`` it then swaps its duplicate blocks for the
        cached ones (as an engine does to free the duplicates)."""
        seq = self.seqs[i % len(self.seqs)]
        self.checked_insert(seq)
        if adopt:
            m, _ = self.checked_match(seq.tokens)
            for j, b in enumerate(m.blocks):
                if seq.blocks[j] != b:
                    assert self.content[b] == self.content[seq.blocks[j]]
                    self.bm.incref([b])
                    self.bm.free([seq.blocks[j]])
                    seq.blocks[j] = b

    @precondition(lambda self: self.seqs)
    @rule(i=INDEX, insert=st.booleans())
    def finish(self, i: int, insert: bool) -> None:
        seq = self.seqs.pop(i % len(self.seqs))
        if insert:
            self.checked_insert(seq)
        self.release(seq)

    @rule(tokens=TOKENS)
    def request_done(self, tokens: list[int]) -> None:
        """A whole request in one step (add, prefill, cache, finish): the cache is left the only
        holder of its new blocks, which makes them evictable and freeable."""
        self.add_request(tokens, cache_prompt=False)
        if self.seqs and self.seqs[-1].tokens == tokens:
            self.finish(len(self.seqs) - 1, insert=True)

    @rule(tokens=TOKENS)
    def probe(self, tokens: list[int]) -> None:
        m, _ = self.checked_match(tokens)
        assert [t for b in m.blocks for t in self.content[b]] == tokens[:m.num_tokens]

    @precondition(lambda self: len(self.locks) < 2)
    @rule(tokens=TOKENS)
    def lock(self, tokens: list[int]) -> None:
        m, prefix = self.checked_match(tokens)
        self.rc.lock(m.node)
        self.locks.append(Lock(m.node, prefix))

    @precondition(lambda self: self.locks)
    @rule(i=INDEX)
    def unlock(self, i: int) -> None:
        self.rc.unlock(self.locks.pop(i % len(self.locks)).node)

    @rule(n=st.integers(0, 3))
    def evict(self, n: int) -> None:
        self.checked_evict(n)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "rc"):
            return
        rc, bm = self.rc, self.bm
        rc.check_integrity()
        cached = set(rc.cached_blocks())
        assert cached == set(self.oracle.values()) and len(cached) == len(self.oracle)
        assert self.tree_prefixes() == self.oracle
        for p, b in self.oracle.items():
            assert self.content[b] == list(p[-1])
        held: dict[int, int] = {}
        for seq in self.seqs:
            assert [t for b in seq.blocks for t in self.content[b]] == seq.tokens
            assert len(seq.blocks) == bm.blocks_for(len(seq.tokens))
            for b in seq.blocks:
                held[b] = held.get(b, 0) + 1
        for b in range(bm.num_blocks):
            assert bm.refcount(b) == held.get(b, 0) + (b in cached), f"block {b}"
        locked = self.locked_prefixes()
        assert rc.evictable_blocks == sum(p not in locked for p in self.oracle)
        assert rc.num_cached_blocks == len(self.oracle)

    def tree_prefixes(self) -> dict[Prefix, int]:
        out: dict[Prefix, int] = {}
        stack: list[tuple[RadixNode, Prefix]] = [(self.rc.root, ())]
        while stack:
            node, prefix = stack.pop()
            for j, b in enumerate(node.blocks):
                out[prefix + tuple(node.key[:j + 1])] = b
            prefix = prefix + tuple(node.key)
            stack.extend((c, prefix) for c in node.children.values())
        return out

    def teardown(self) -> None:
        if not hasattr(self, "rc"):
            return
        for seq in self.seqs:
            self.release(seq)
        for lk in self.locks:
            self.rc.unlock(lk.node)
        self.seqs, self.locks = [], []
        assert self.rc.evictable_blocks == self.rc.num_cached_blocks
        cached = self.rc.num_cached_blocks
        assert self.checked_evict(self.bm.num_blocks) == cached  # all were the cache's alone
        self.rc.check_integrity()
        assert self.rc.num_cached_blocks == 0 and not self.oracle
        assert self.bm.num_free == self.bm.num_blocks  # everything freed returns every block


CacheMachine.TestCase.settings = settings(
    max_examples=80, stateful_step_count=60, deadline=None, derandomize=True)
test_cache_random_operations = CacheMachine.TestCase
