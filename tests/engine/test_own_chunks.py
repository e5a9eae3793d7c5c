"""Own-position attention in chunks of positions (decode_step.c's ``own_chunk``, split-K).

A row's own positions are attended in chunks whose length depends on the row's context alone
(``mg_own_chunk``); each chunk's online-softmax state is folded into the row's in chunk order,
and with fewer rows than threads each chunk is a work unit of its own, so one decoding row's
attention is shared among threads. Contexts of 1, chunk - 1, chunk, chunk + 1 and
3 chunk + 5 positions, for a decoding row, a row of three tokens and two rows of a prefix group:

- kernel (``mg_attention``, ``mg_attention_q8``), float32 and int8 caches: within a derived
  bound of float64 attention over the same (dequantized) values, and the same bits on 1, 2 and
  4 threads;
- the whole native step, one row decoding across those contexts on a float32 and an int8 cache:
  logits and cache the same bits on 1, 2 and 4 threads, and (float32) within FLOAT_LOGPROB_TOL
  of the PyTorch path.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import pytest
import torch

from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.loader import load_model
from metagen.engine.native.build import NativeBuildError, compiler
from metagen.engine.native.decode_step import DecodeStep, StepPlan
from metagen.engine.native.library import open_library
from tests.tolerances import FLOAT_LOGPROB_TOL

from ._native_variants import variants

BLOCK, NUM_BLOCKS = 4, 256
THREADS = (1, 2, 4)
KB = 32  # decode_step.c's keys per online-softmax block
U = 2.0 ** -24  # float32 unit roundoff


@pytest.fixture(scope="module", params=variants(), ids=[name for name, _ in variants()])
def lib(request) -> ctypes.CDLL:
    """The native library on each vector path this CPU runs."""
    name, flags = request.param
    if compiler() is None:
        pytest.skip("no C compiler")
    try:
        return open_library(flags)
    except NativeBuildError as e:
        pytest.skip(f"this machine cannot build the {name} path: {e}")


@pytest.fixture(scope="module")
def model(random_model_dir) -> LlamaModel:
    """A random llama: 8 query heads on 2 kv heads, head_dim 8, 512 positions."""
    return load_model(random_model_dir("llama"))


def _chunk(lib: ctypes.CDLL) -> int:
    """The chunk length at the contexts tested (:func:`_contexts`), where it is the least."""
    lib.mg_own_chunk.restype, lib.mg_own_chunk.argtypes = ctypes.c_int64, [ctypes.c_int64]
    chunk = int(lib.mg_own_chunk(1))
    assert all(lib.mg_own_chunk(n) == chunk for n in _contexts(chunk))
    return chunk


def _contexts(chunk: int) -> list[int]:
    """Own positions at, below and past chunk boundaries: one chunk, two, four."""
    return [1, chunk - 1, chunk, chunk + 1, 3 * chunk + 5]


def _plans(n: int) -> list[StepPlan]:
    """Plans whose last token attends n own positions: a decoding row alone; a row of three new
    tokens alone (n >= 3); two rows sharing their first 2 blocks (a prefix group) and then n
    own positions each; all of them in one plan (more rows than some thread counts)."""
    blocks = iter(torch.randperm(NUM_BLOCKS - 1, generator=torch.Generator().manual_seed(n))
                  .add(1).tolist())

    def table(positions: int, shared: Sequence[int] = ()) -> list[int]:
        return [*shared, *(next(blocks) for _ in range(-(-positions // BLOCK) - len(shared)))]

    prefix = table(2 * BLOCK)
    rows = [(table(n), n - 1, 1)] + ([(table(n), n - 3, 3)] if n >= 3 else [])
    group = [(table(n + 2 * BLOCK, prefix), n + 2 * BLOCK - 1, 1) for _ in range(2)]
    alone = [StepPlan.build(BLOCK, [t], [s], [k], []) for t, s, k in rows]
    pair = StepPlan.build(BLOCK, [t for t, _, _ in group], [s for _, s, _ in group], [1, 1],
                          [([0, 1], 2)])
    every = rows + group
    g = len(rows)
    return alone + [pair, StepPlan.build(BLOCK, [t for t, _, _ in every],
                                         [s for _, s, _ in every], [k for _, _, k in every],
                                         [([g, g + 1], 2)])]


def _reference(q: torch.Tensor, kf: torch.Tensor, vf: torch.Tensor, plan: StepPlan,
               scale: float) -> torch.Tensor:
    """Each token's float64 attention over its row's positions 0 .. its own."""
    hq, hkv = q.shape[1], kf.shape[2]
    out = torch.empty(q.shape, dtype=torch.float64)
    for r in range(plan.n_rows):
        for t in range(int(plan.tok_off[r]), int(plan.tok_off[r + 1])):
            pos = torch.arange(int(plan.start[r]) + t - int(plan.tok_off[r]) + 1)
            slots = plan.tables[r, pos // BLOCK] * BLOCK + pos % BLOCK
            k, v = (x.view(-1, hkv, x.shape[-1])[slots].double().repeat_interleave(hq // hkv, 1)
                    for x in (kf, vf))  # (n, Hq, D)
            p = torch.softmax(torch.einsum("hd,nhd->hn", q[t].double(), k) * scale, dim=-1)
            out[t] = torch.einsum("hn,nhd->hd", p, v)
    return out


def _bound(q: torch.Tensor, kf: torch.Tensor, vf: torch.Tensor, m: int, chunk: int) -> float:
    """What float32 may move a query's output against float64, over m positions in chunks.

    The output is sum_j p_j v_j / sum_j p_j. Each score q . k * scale, a d-term dot product, is
    off by at most d u |q| |k| scale (u = 2^-24; Higham's bound, sum |q_i k_i| <= |q| |k|), and
    so is the running max it is taken against: its weight p_j is off by at most twice that,
    relative, plus ~2u for each exp and each multiply it goes through (a rescale per key block
    of KB and per chunk merge, ceil(m / chunk) - 1 of them, each an exp and a multiply). The sums
    add m terms in float32, plus two roundings per merge: gamma ~ (m + 2 merges) u of their
    sums of magnitudes. A weighted mean of values |v| <= V whose weights are each off by at most
    e, relative, and whose sums by at most g moves by at most 2 (e + g) V."""
    d = q.shape[-1]
    merges = -(-m // chunk) - 1
    qk = float(q.norm(dim=-1).max() * kf.norm(dim=-1).max()) * d ** -0.5
    e = 2 * d * U * qk + 2 * U * (2 * -(-m // KB) + 2 * merges)
    g = (m + 2 * merges) * U
    return 2 * (e + g) * float(vf.abs().max())


@pytest.mark.parametrize("kind", ["float32", "int8"])
def test_chunked_attention_equals_float64_attention_and_is_thread_independent(lib, model, kind):
    step = DecodeStep(lib, model)
    cfg = model.cfg
    hkv, d, hq = cfg.num_kv_heads, cfg.head_dim, cfg.num_heads
    chunk = _chunk(lib)
    g = torch.Generator().manual_seed(11)
    shape = (NUM_BLOCKS, BLOCK, hkv, d)
    if kind == "int8":
        kc, vc = (torch.randint(-127, 128, shape, generator=g, dtype=torch.int8)
                  for _ in range(2))
        ks, vs = (0.01 + 0.02 * torch.rand(NUM_BLOCKS, hkv, generator=g) for _ in range(2))
        # the kernel's dequantized values, (float)q * scale in float32, exactly
        kf, vf = (c.float() * s[:, None, :, None] for c, s in ((kc, ks), (vc, vs)))
        scales: tuple[torch.Tensor, torch.Tensor] | None = (ks, vs)
    else:
        kc, vc = (torch.randn(shape, generator=g) for _ in range(2))
        kf, vf, scales = kc, vc, None
    for n in _contexts(chunk):
        for i, plan in enumerate(_plans(n)):
            t = plan.token_offsets[-1]
            q = torch.randn(t, hq, d, generator=g)
            outs = [step.attention(q, kc, vc, plan, threads=k, scales=scales) for k in THREADS]
            for k, o in zip(THREADS[1:], outs[1:]):
                assert torch.equal(o, outs[0]), (n, i, k)
            ref = _reference(q, kf, vf, plan, d ** -0.5)
            err = float((outs[0].double() - ref).abs().max())
            assert err <= _bound(q, kf, vf, n + 2 * BLOCK, chunk), (n, i, err)


def _decoding_runners(lib: ctypes.CDLL, model: LlamaModel, dtype: torch.dtype
                      ) -> list[ModelRunner]:
    """A PyTorch-only runner, then one native runner per thread count, each with its own cache."""
    cfg = model.cfg
    out = []
    for t in (None, *THREADS):
        kv = KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim, dtype,
                     "cpu")
        runner = ModelRunner(model, kv, native=t is not None)
        if t is not None:
            runner.native = DecodeStep(lib, model)
            runner.native.threads = t
        out.append(runner)
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8])
def test_one_row_decoding_across_chunks_is_thread_independent(lib, model, dtype):
    """A 60-token prompt (PyTorch), then one row decoding to 3 chunk + 8 positions, past every
    context of :func:`_contexts`: every step's logits and the caches the same bits on 1, 2 and 4
    threads; a float32 cache's logits within FLOAT_LOGPROB_TOL of the PyTorch path's (both
    attend the same float32 values, in other orders: tests/tolerances.py; the int8 paths store
    values from different float32 inputs, which that bound does not cover)."""
    chunk = _chunk(lib)
    ref, *native = _decoding_runners(lib, model, dtype)
    end = 3 * chunk + 8
    table = list(range(1, 1 + -(-end // BLOCK)))
    tokens = [3 + (11 * i) % 90 for i in range(end)]
    for r in (ref, *native):
        r.extend([ExtendRequest(table, 0, tokens[:60])])
    for pos in range(60, end):
        reqs = [ExtendRequest(table, pos, [tokens[pos]])]
        outs = [r.extend(reqs)[0] for r in native]
        for r, o in zip(native[1:], outs[1:]):
            assert torch.equal(o, outs[0]), (pos, r.native.threads)
        if dtype == torch.float32:
            want = ref.extend(reqs)[0]
            assert float((outs[0] - want).abs().max()) < FLOAT_LOGPROB_TOL, pos
    assert all(r.native_steps == end - 60 for r in native)
    for r in native[1:]:
        assert torch.equal(r.kv.k, native[0].kv.k) and torch.equal(r.kv.v, native[0].kv.v)
        if dtype == torch.int8:
            assert all(torch.equal(a, b) for a, b in zip(r.kv.scales, native[0].kv.scales))


@pytest.mark.parametrize("head_dim", [64, 24])
def test_grouped_query_attention_equals_its_heads_attending_alone(lib, head_dim):
    """A query's output does not depend on how many queries share its kv head: 8 query heads on
    2 kv heads (4 per kv head, where decode_step.c takes values query by query with the output
    in registers) equal, bit for bit, the same queries on 8 kv heads that repeat the 2 (one per
    kv head: values position by position), for a decoding row and a row of three new tokens, at
    contexts across key blocks and chunks, on 1 and 2 threads. A head_dim of whole vectors (64)
    and one that is not (24 floats: 3 AVX2 vectors, 1.5 AVX-512 ones: masked loads)."""
    from metagen.engine.native.decode_step import _Model, _plan_struct

    fn = lib.mg_attention
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] + [ctypes.c_void_p] * 3 + [
        ctypes.c_int]
    hq, hkv, d = 8, 2, head_dim
    g = torch.Generator().manual_seed(5)
    kc, vc = (torch.randn(NUM_BLOCKS, BLOCK, hkv, d, generator=g) for _ in range(2))
    wide = [c.repeat_interleave(hq // hkv, dim=2).contiguous() for c in (kc, vc)]

    def attend(kv_heads: int, q: torch.Tensor, plan: StepPlan, caches, threads: int):
        model = _Model(hq * d, hq, kv_heads, d, 0, 1, 1e-5, d ** -0.5, None, None)
        out = torch.empty_like(q)
        assert fn(ctypes.byref(model), ctypes.byref(_plan_struct(plan)), q.data_ptr(),
                  q.stride(0), out.data_ptr(), caches[0].data_ptr(), caches[1].data_ptr(),
                  threads) == 0
        return out

    for n in (1, 31, 33, 100, 3 * _chunk(lib) + 5):
        for tokens in (1, 3):
            table = list(range(1, 1 + -(-(n + tokens) // BLOCK)))
            plan = StepPlan.build(BLOCK, [table], [n], [tokens], [])
            q = torch.randn(tokens, hq, d, generator=g)
            for threads in (1, 2):
                grouped = attend(hkv, q, plan, (kc, vc), threads)
                assert torch.equal(grouped, attend(hq, q, plan, wide, threads)), (n, tokens)
