"""The consecutive-slot fast paths (cache views, for one row and for a Hydragen prefix) equal
the general gather paths."""

from __future__ import annotations

import functools

import torch

from metagen.engine.attention import PrefixGroup, RowChunk, _attend_chunk, _kv_at
from metagen.engine.model_runner import _consecutive_start


def _attend(q, kc, vc, chunk):
    return _attend_chunk(q, functools.partial(_kv_at, kc, vc), chunk, 0.3)


def test_consecutive_start_golden():
    assert _consecutive_start(torch.tensor([[5, 6, 7, 8]])) == 5
    assert _consecutive_start(torch.tensor([[9]])) == 9
    assert _consecutive_start(torch.tensor([[5, 6, 8, 9]])) is None  # a hole: block change
    assert _consecutive_start(torch.tensor([[16, 17, 0, 1]])) is None


def test_view_path_equals_gather_path_for_prefill_and_decode():
    g = torch.Generator().manual_seed(0)
    hkv, d, hq, slots = 2, 8, 4, 64
    kc = torch.randn(slots, hkv, d, generator=g)
    vc = torch.randn(slots, hkv, d, generator=g)
    for m, c, start in ((5, 12, 20), (1, 30, 3)):  # a prefill chunk (causal), a decode step
        q = torch.randn(m, hq, d, generator=g)
        kv_slots = torch.arange(start, start + c)[None]  # (1, C)
        kvpos, qpos = torch.arange(c), torch.arange(c - m, c)
        mask = (kvpos[None, :] <= qpos[:, None])[None]  # (1, M, C)
        q_index = torch.arange(m)[None]
        gather = _attend(q, kc, vc, RowChunk(q_index, kv_slots, mask))
        view = _attend(q, kc, vc, RowChunk(q_index, kv_slots, mask, kv_start=start))
        assert torch.equal(view, gather)


def test_hydragen_prefix_view_equals_prefix_gather():
    g = torch.Generator().manual_seed(1)
    hkv, d, hq, slots, rows, p, s = 2, 8, 4, 64, 3, 8, 5
    kc = torch.randn(slots, hkv, d, generator=g)
    vc = torch.randn(slots, hkv, d, generator=g)
    q = torch.randn(rows, hq, d, generator=g)  # one decoding query per row
    suffix = torch.stack([torch.arange(40 + 6 * r, 40 + 6 * r + s) for r in range(rows)])
    mask = torch.ones(rows, 1, s, dtype=torch.bool)
    prefix = torch.arange(16, 16 + p)
    q_index = torch.arange(rows)[:, None]

    def chunk(start):
        return RowChunk(q_index, suffix, mask, [PrefixGroup(torch.arange(rows), prefix, start)])

    view = _attend(q, kc, vc, chunk(16))
    gather = _attend(q, kc, vc, chunk(None))
    assert torch.equal(view, gather)
    # and both equal plain attention over prefix + suffix slots
    full = torch.cat([prefix.expand(rows, p), suffix], 1)
    ref = _attend(q, kc, vc, RowChunk(q_index, full, torch.ones(rows, 1, p + s,
                                                                      dtype=torch.bool)))
    assert (view - ref).abs().max() < 1e-5
