"""BlockManager: allocation, sharing, copy-on-write, the budget, and its invariant.

The last test is a hypothesis state machine checking the refcounts against a shadow count of the
holders after every step of random allocate/fork/free/copy-on-write sequences.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from metagen.engine.block_manager import BlockManager, IntegrityError, OutOfBlocks
from metagen.errors import InvalidParameterError, MetagenError


def test_fresh_manager_allocates_in_order_and_lifo_reuses() -> None:
    bm = BlockManager(8, 4)
    assert (bm.num_blocks, bm.block_size, bm.num_free, bm.num_used) == (8, 4, 8, 0)
    assert bm.allocate(3) == [0, 1, 2]
    assert bm.allocate(0) == []
    bm.free([1])
    assert bm.allocate(2) == [1, 3]  # the block freed last comes back first
    assert bm.num_free == 4
    bm.check_integrity()


def test_out_of_blocks_allocates_nothing() -> None:
    bm = BlockManager(4, 2)
    bm.allocate(3)
    assert bm.can_allocate(1) and not bm.can_allocate(2)
    with pytest.raises(OutOfBlocks) as info:
        bm.allocate(2)
    assert isinstance(info.value, MetagenError)
    assert (info.value.requested, info.value.available) == (2, 1)
    assert bm.num_free == 1
    bm.check_integrity()


def test_budget_is_never_exceeded() -> None:
    bm = BlockManager(5, 16)
    got = bm.allocate(5)
    assert sorted(got) == [0, 1, 2, 3, 4] and bm.num_free == 0
    for n in (1, 2, 100):
        with pytest.raises(OutOfBlocks):
            bm.allocate(n)
    bm.incref([got[0]])  # shared: a write needs a copy, and there is no room for one
    with pytest.raises(OutOfBlocks):
        bm.copy_on_write(got[0])
    assert bm.refcount(got[0]) == 2 and bm.num_free == 0


def test_incref_and_free_count_references() -> None:
    bm = BlockManager(4, 2)
    (b,) = bm.allocate(1)
    bm.incref([b, b])
    assert bm.refcount(b) == 3
    bm.free([b])
    assert bm.refcount(b) == 2 and bm.num_free == 3
    bm.free([b, b])
    assert bm.refcount(b) == 0 and bm.num_free == 4
    bm.check_integrity()


def test_misuse_is_rejected_without_change() -> None:
    bm = BlockManager(4, 2)
    a, b = bm.allocate(2)
    with pytest.raises(InvalidParameterError, match="double free"):
        bm.free([a, a])  # refcount 1, freed twice
    assert bm.refcount(a) == 1
    with pytest.raises(InvalidParameterError, match="free"):
        bm.incref([b, 3])  # 3 is free: sharing it would corrupt the free list
    assert bm.refcount(b) == 1
    with pytest.raises(InvalidParameterError, match="block"):
        bm.refcount(4)
    with pytest.raises(InvalidParameterError):
        bm.free([-1])
    with pytest.raises(InvalidParameterError):
        bm.allocate(-1)
    with pytest.raises(InvalidParameterError):
        bm.copy_on_write(3)
    bm.check_integrity()


@pytest.mark.parametrize("args", [(0, 4), (4, 0), (-1, 4), (True, 4), (4, 2.0)])
def test_constructor_validates(args: tuple) -> None:
    with pytest.raises(InvalidParameterError):
        BlockManager(*args)


def test_copy_on_write() -> None:
    bm = BlockManager(4, 2)
    (b,) = bm.allocate(1)
    assert bm.copy_on_write(b) == (b, False)  # sole holder writes in place
    bm.incref([b])  # a fork shares it
    new, copied = bm.copy_on_write(b)
    assert copied and new != b
    assert bm.refcount(b) == 1 and bm.refcount(new) == 1
    bm.check_integrity()


def test_blocks_for() -> None:
    bm = BlockManager(4, 16)
    assert [bm.blocks_for(n) for n in (0, 1, 16, 17, 32)] == [0, 1, 1, 2, 2]


def test_check_integrity_detects_corruption() -> None:
    bm = BlockManager(4, 2)
    bm.allocate(1)
    bm._refcounts[0] = 0  # corrupt: refcount 0 but not on the free list
    with pytest.raises(IntegrityError, match="block 0"):
        bm.check_integrity()
    bm = BlockManager(4, 2)
    bm._free.append(3)
    with pytest.raises(AssertionError, match="more than once"):
        bm.check_integrity()


class BlockManagerMachine(RuleBasedStateMachine):
    """Sequences hold block tables; refcount(b) must equal the number of table entries naming b."""

    def __init__(self) -> None:
        super().__init__()
        self.bm = BlockManager(12, 2)
        self.tables: list[list[int]] = []

    @rule(n=st.integers(0, 6))
    def allocate(self, n: int) -> None:
        free = self.bm.num_free
        if n > free:
            with pytest.raises(OutOfBlocks):
                self.bm.allocate(n)
            assert self.bm.num_free == free
        else:
            table = self.bm.allocate(n)
            assert len(set(table)) == n
            self.tables.append(table)

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 100))
    def fork(self, i: int) -> None:
        table = self.tables[i % len(self.tables)]
        self.bm.incref(table)
        self.tables.append(list(table))

    @precondition(lambda self: self.tables)
    @rule(i=st.integers(0, 100))
    def finish(self, i: int) -> None:
        self.bm.free(self.tables.pop(i % len(self.tables)))

    @precondition(lambda self: any(self.tables))
    @rule(i=st.integers(0, 100), j=st.integers(0, 100))
    def write(self, i: int, j: int) -> None:
        tables = [t for t in self.tables if t]
        table = tables[i % len(tables)]
        pos = j % len(table)
        old, rc = table[pos], self.bm.refcount(table[pos])
        try:
            new, copied = self.bm.copy_on_write(old)
        except OutOfBlocks:
            assert rc > 1 and self.bm.num_free == 0
            return
        assert copied == (rc > 1)
        table[pos] = new
        assert self.bm.refcount(new) == 1

    @invariant()
    def refcounts_match_holders(self) -> None:
        self.bm.check_integrity()
        held = Counter(b for t in self.tables for b in t)
        assert all(self.bm.refcount(b) == held[b] for b in range(self.bm.num_blocks))
        assert self.bm.num_free == self.bm.num_blocks - len(held)

    def teardown(self) -> None:
        for t in self.tables:
            self.bm.free(t)
        self.bm.check_integrity()
        assert self.bm.num_free == self.bm.num_blocks


BlockManagerMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=50, deadline=None, derandomize=True)
test_block_manager_random_operations = BlockManagerMachine.TestCase
