"""Hydragen's grouping of rows by shared leading blocks against a block-by-block reference."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.model_runner import ExtendRequest, _shared_prefixes

BS = 4


def _reference(reqs, min_tokens):
    """Per group of rows with the same first block: extend the prefix one block at a time while
    every row has that block and has cached past it."""
    by_first: dict[int, list[int]] = {}
    for i, r in enumerate(reqs):
        if r.num_cached >= BS:
            by_first.setdefault(r.block_table[0], []).append(i)
    out = []
    for rows in by_first.values():
        if len(rows) < 2:
            continue
        limit = min(reqs[i].num_cached // BS for i in rows)
        n = 0
        while n < limit and all(reqs[i].block_table[n] == reqs[rows[0]].block_table[n]
                                for i in rows):
            n += 1
        if n and n * BS >= min_tokens:
            out.append((rows, n))
    return out


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_groups_equal_the_block_by_block_reference(data):
    trunk = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=8))  # few ids: collisions
    reqs = []
    for _ in range(data.draw(st.integers(1, 6))):
        keep = data.draw(st.integers(0, len(trunk)))
        own = data.draw(st.lists(st.integers(0, 9), max_size=4))
        table = trunk[:keep] + own or [0]
        cached = data.draw(st.integers(0, len(table) * BS - 1))
        reqs.append(ExtendRequest(table, cached, [1]))
    min_tokens = data.draw(st.sampled_from([0, BS, 3 * BS]))
    assert _shared_prefixes(reqs, BS, min_tokens) == _reference(reqs, min_tokens)
