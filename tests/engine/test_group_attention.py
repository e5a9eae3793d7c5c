"""Native attention with Hydragen prefix groups (``mg_attention``) equals plain attention, on
random shapes, and is the same bit for bit on any number of threads.

A prefix group's queries attend to the group's shared prefix in units of (group, run of kv
heads): each key block of the prefix is read once per unit, for every kv head of the run and
every query of the group on those heads; then each token attends to its own row's positions.
Hypothesis draws the numbers of rows, groups, kv heads, query heads per kv head, head_dim (a
multiple of 4: the query-vectorised path, unless a group has at most a quarter vector of queries
per kv head; otherwise the per-query path), prefix lengths and new
tokens per row, on every vector path this CPU runs, and compares against float64 softmax
attention over each token's positions 0 .. its own. Inputs are N(0, 1) and outputs are convex
combinations of values, so the float32 kernel differs from the float64 reference by summation
rounding: the bound asserted is 1e-5 (observed ~1e-6). The same call on 1, 2, 3 and 5 threads
(which change the run length of each unit) must give the one-thread result bit for bit.
"""

from __future__ import annotations

import ctypes

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.native.decode_step import StepPlan, _Model, _plan_struct
from metagen.engine.native.library import open_library

from ._native_variants import variants

BLOCK = 4
TOL = 1e-5
THREADS = (1, 2, 3, 5)


@pytest.fixture(scope="module", params=variants(), ids=[name for name, _ in variants()])
def attention(request):
    """``mg_attention`` of this variant's build."""
    try:
        lib = open_library(request.param[1])
    except Exception as e:  # no compiler or no vector path: nothing native to test
        pytest.skip(f"no native {request.param[0]} library: {e}")
    fn = lib.mg_attention
    fn.restype = ctypes.c_int
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [p, p, p, i, p, p, p, ctypes.c_int]
    return fn


@st.composite
def layouts(draw):
    """(plan, number of cache blocks, kv heads, query heads per kv head, head_dim): groups of
    rows that share their first blocks, and rows alone; each row 1-3 new tokens."""
    hkv, g = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    d = draw(st.sampled_from([4, 8, 12, 16, 24, 64, 6]))
    next_block = 0
    tables, starts, lengths, groups = [], [], [], []
    for _ in range(draw(st.integers(1, 3))):
        shared = draw(st.integers(0, 12))  # blocks of the prefix (0: rows alone)
        prefix = list(range(next_block, next_block + shared))
        next_block += shared
        members = []
        for _ in range(draw(st.integers(1, 5)) if shared else 1):
            own = draw(st.integers(0, 6))  # positions after the prefix, before the new tokens
            new = draw(st.integers(1, 3))
            n_own = -(-(own + new) // BLOCK)
            members.append(len(tables))
            tables.append(prefix + list(range(next_block, next_block + n_own)))
            next_block += n_own
            starts.append(shared * BLOCK + own)
            lengths.append(new)
        if shared:
            groups.append((members, shared))
    return StepPlan.build(BLOCK, tables, starts, lengths, groups), next_block, hkv, g, d


def _reference(q, kc, vc, plan: StepPlan) -> torch.Tensor:
    """Each token's float64 softmax attention over its row's positions 0 .. its own."""
    hq, hkv, d = q.shape[1], kc.shape[2], q.shape[2]
    out = torch.empty(q.shape, dtype=torch.float64)
    for r in range(plan.start.shape[0]):
        for t in range(int(plan.tok_off[r]), int(plan.tok_off[r + 1])):
            pos = torch.arange(int(plan.start[r]) + t - int(plan.tok_off[r]) + 1)
            slots = plan.tables[r, pos // BLOCK] * BLOCK + pos % BLOCK
            k, v = (c.view(-1, hkv, d)[slots].double().repeat_interleave(hq // hkv, dim=1)
                    for c in (kc, vc))  # (n, Hq, D)
            p = torch.softmax(torch.einsum("hd,nhd->hn", q[t].double(), k) * d ** -0.5, dim=-1)
            out[t] = torch.einsum("hn,nhd->hd", p, v)
    return out


@settings(max_examples=40, deadline=None)
@given(layout=layouts(), seed=st.integers(0, 2**31 - 1))
def test_group_attention_equals_plain_attention_on_any_thread_count(attention, layout, seed):
    plan, n_blocks, hkv, g, d = layout
    gen = torch.Generator().manual_seed(seed)
    kc, vc = (torch.randn(max(n_blocks, 1), BLOCK, hkv, d, generator=gen) for _ in range(2))
    t = int(plan.tok_off[-1])
    q = torch.randn(t, hkv * g, d, generator=gen)
    model = _Model(hkv * g * d, hkv * g, hkv, d, 0, 1, 1e-5, d ** -0.5, None, None)
    plan_c = _plan_struct(plan)
    outs = []
    for threads in THREADS:
        out = torch.empty_like(q)
        assert attention(ctypes.byref(model), ctypes.byref(plan_c), q.data_ptr(), q.stride(0),
                         out.data_ptr(), kc.data_ptr(), vc.data_ptr(), threads) == 0
        outs.append(out)
    assert float((outs[0].double() - _reference(q, kc, vc, plan)).abs().max()) < TOL
    for threads, out in zip(THREADS[1:], outs[1:]):
        assert torch.equal(out, outs[0]), f"{threads} threads"
