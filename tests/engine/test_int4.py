"""int4 weights with group scales: the quantizer's bound, the packed layout's round trip and a
golden byte, the native product (both vector paths) against a float64 product of the quantized
activations and dequantized weight, bit-equal on any thread count and slice, the torch fallback,
the decode step against the layer-by-layer path, and what the engine does with it
(``quantization="int4"``) on real models."""

from __future__ import annotations

import ctypes

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.config import EngineConfig
from metagen.engine.kv_cache import KVCache
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.model_runner import ModelRunner
from metagen.engine.models import load_model
from metagen.engine.models.int4 import (
    Int4Weight,
    dequantize_int4,
    pack_int4,
    quantize_int4,
    unpack_int4,
)
from metagen.engine.models.int8 import Int8Weight, quantize_activations
from metagen.engine.models.llama import PROJECTIONS
from metagen.engine.models.quantize import quantization_of, stores
from metagen.engine.native import int4_matmul as i4
from metagen.engine.native.decode_step import DecodeStep
from metagen.engine.native.int4_matmul import Int4Matmul
from metagen.engine.native.library import open_library
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

from ._bounds import product_bound
from ._native_variants import load_variant, variants
from .test_decode_step import BLOCK, NUM_BLOCKS, _check_native_equals_pytorch


@settings(max_examples=60, deadline=None)
@given(out=st.integers(1, 40), n_in=st.integers(1, 100), spread=st.sampled_from([1e-3, 1.0, 1e3]),
       seed=st.integers(0, 2**16))
def test_round_trip_within_half_a_step_per_group(out, n_in, spread, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n_in, generator=g) * spread * torch.rand(out, 1, generator=g)
    q, scale = quantize_int4(w)
    blocks = -(-n_in // 32)
    assert q.dtype == torch.int8 and q.shape == (out, n_in)
    assert int(q.min()) >= -8 and int(q.max()) <= 7
    assert scale.dtype == torch.float32 and scale.shape == (out, blocks)
    step = scale.double().abs().repeat_interleave(32, dim=1)[:, :n_in]
    err = (dequantize_int4(q, scale).double() - w.double()).abs()
    assert (err <= step * (1 + 1e-5) + 1e-30).all()  # a value clamped to 7 steps: one step
    unclamped = q < 7
    assert (err[unclamped] <= step[unclamped] / 2 * (1 + 1e-5) + 1e-30).all()
    # each block's value of largest magnitude is exactly -8 steps
    pw = torch.nn.functional.pad(w, (0, blocks * 32 - n_in)).view(out, blocks, 32)
    pq = torch.nn.functional.pad(q, (0, blocks * 32 - n_in)).view(out, blocks, 32)
    assert (pq.gather(2, pw.abs().argmax(dim=2, keepdim=True)) == -8).all()
    packed, ws = pack_int4(q, scale)
    groups = -(-out // 16)
    assert packed.dtype == torch.uint8 and packed.numel() == groups * 16 * blocks * 32 // 2
    assert ws.shape == (groups, blocks, 16)
    q2, s2 = unpack_int4(packed, ws, out, n_in)
    assert torch.equal(q2, q) and torch.equal(s2, scale)


def test_packed_layout_golden_bytes():
    """Chunk t of a group: byte 4c + i holds channel c's input 8t + i (low nibble) and 8t + 4 + i
    (high), each as q + 8; padding channels and inputs hold 8 (q = 0)."""
    q = torch.zeros(2, 40, dtype=torch.int8)
    q[0, 0], q[0, 4], q[1, 5], q[1, 39] = 7, -7, 3, -1
    packed, ws = pack_int4(q, torch.ones(2, 2))
    assert packed.numel() == 16 * 64 // 2 and ws.shape == (1, 2, 16)
    chunk = packed.view(8, 64)  # (chunk, byte) of the one group
    assert chunk[0, 0] == (7 + 8) | ((-7 + 8) << 4)      # channel 0, inputs 0 and 4
    assert chunk[0, 4 + 1] == 8 | ((3 + 8) << 4)         # channel 1, inputs 1 and 5
    assert chunk[4, 4 + 3] == 8 | ((-1 + 8) << 4)        # channel 1, inputs 35 and 39
    assert chunk[7, 63] == 8 | (8 << 4)                  # padding: channel 15, inputs 59, 63
    assert ws[0, :, :2].eq(1).all() and ws[0, :, 2:].eq(0).all()


def test_zero_blocks_golden_values_and_bad_weights():
    q, scale = quantize_int4(torch.cat([torch.zeros(1, 32), torch.ones(1, 32)], dim=1))
    assert scale[0, 0] == 0 and torch.equal(dequantize_int4(q, scale)[0, :32], torch.zeros(32))
    # Q4_0's rule: the extreme (-2.0) is -8 steps of 0.25; 1.9 is 7.6 steps, clamped to 7
    q, scale = quantize_int4(torch.tensor([[-2.0, 1.9, 0.3, 0.125, -0.0625]]))
    assert scale.tolist() == [[0.25]]
    assert q.tolist() == [[-8, 7, 1, 0, 0]]  # 0.5 steps rounds to even: 0
    for bad in (torch.ones(3), torch.ones(2, 2, dtype=torch.int32),
                torch.tensor([[1.0, float("nan")]]), torch.tensor([[float("inf"), 1.0]])):
        with pytest.raises(InvalidParameterError, match="invalid w="):
            quantize_int4(bad)


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def kernel(request, tmp_path_factory) -> Int4Matmul:
    return load_variant(i4.load_from, request.param, tmp_path_factory)


def _case(m: int, k: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q, scale = quantize_int4(torch.randn(n, k, generator=g))
    packed, ws = pack_int4(q, scale)
    return torch.randn(m, k, generator=g), packed, ws, q, scale, torch.randn(n, generator=g)


# M crosses the 4/2-row tile and the engine's 32 rows; K the 32-input block (zero-padded tail)
# and N the 16-channel group (8-channel halves on AVX2) and their tails.
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 34), k=st.sampled_from([1, 5, 31, 32, 33, 64, 100, 512]),
       n=st.sampled_from([1, 7, 8, 9, 16, 17, 40, 130]), with_bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_kernel_equals_quantized_activations_times_dequantized_weight(kernel, m, k, n, with_bias,
                                                                     seed):
    x, packed, ws, q, scale, bias = _case(m, k, n, seed)
    b = bias if with_bias else None
    got = kernel(x, packed, ws, n, b)
    xq = quantize_activations(x).double()
    w = dequantize_int4(q, scale).double()
    ref = xq @ w.t() + (bias.double() if with_bias else 0)
    assert got.shape == (m, n) and got.dtype == torch.float32
    # exact integer block sums, float32 rounding of the per-block products and their sum
    bound = 1e-6 * (xq.abs() @ w.abs().t() + (bias.double().abs() if with_bias else 0) + 1)
    assert ((got.double() - ref).abs() <= bound * 8).all()


@pytest.mark.parametrize("m", [1, 3, 5, 16])
@pytest.mark.parametrize("n", [8, 40, 130])
def test_threaded_product_equals_one_thread_bitwise(kernel, m, n):
    x, packed, ws, _, _, bias = _case(m, 77, n, m * 1000 + n)
    for b in (None, bias):
        ref = kernel(x, packed, ws, n, b, threads=1)
        for t in (2, 3, 5):
            assert torch.equal(kernel(x, packed, ws, n, b, threads=t), ref), (t, b is None)


def test_a_row_is_the_same_alone_and_in_a_batch(kernel):
    x, packed, ws, _, _, _ = _case(7, 96, 40, 3)
    whole = kernel(x, packed, ws, 40)
    for r in range(7):
        assert torch.equal(kernel(x[r:r + 1].contiguous(), packed, ws, 40)[0], whole[r])


@pytest.mark.parametrize("isa", [name for name, _ in variants()])
def test_column_slices_computed_apart_equal_the_whole_product(isa, tmp_path_factory):
    """The slice function the decode step calls: any [c0, c1), also inside a group or a half,
    gives the whole product's columns bit for bit."""
    flags = dict(variants())[isa]
    load_variant(i4.load_from, (isa, flags), tmp_path_factory)  # skips if it cannot build
    lib = open_library(flags)
    m, k, n = 3, 70, 45
    x, packed, ws, _, _, bias = _case(m, k, n, 11)
    whole = Int4Matmul(lib)(x, packed, ws, n, bias)
    ldq, ldd = lib.mg_a8_ldq(ctypes.c_int64(k)), lib.mg_a8_ldd(ctypes.c_int64(k))
    q = torch.zeros(m, ldq, dtype=torch.int8)
    d = torch.zeros(m, ldd)
    xs = torch.zeros(m, ldd, dtype=torch.int32)
    lib.mg_a8_quantize(ctypes.c_void_p(x.data_ptr()), ctypes.c_int64(m), ctypes.c_int64(k),
                       ctypes.c_void_p(q.data_ptr()), ctypes.c_void_p(d.data_ptr()))
    lib.mg_w4_xsums(ctypes.c_void_p(q.data_ptr()), ctypes.c_int64(m), ctypes.c_int64(k),
                    ctypes.c_void_p(xs.data_ptr()))
    y = torch.full((m, n), float("nan"))
    for c0, c1 in ((0, 3), (3, 8), (8, 16), (16, 21), (21, 45)):
        lib.mg_w4_matmul_cols(*(ctypes.c_void_p(t.data_ptr()) for t in (q, d, xs, packed, ws, bias,
                                                                          y)),
                              *(ctypes.c_int64(v) for v in (m, k, n, c0, c1)))
    assert torch.equal(y, whole)


def test_kernel_rejects_operands_that_do_not_fit(kernel):
    x, packed, ws, _, _, bias = _case(2, 40, 20, 0)
    for args in ((packed[:-1], ws, 20, None), (packed.to(torch.int8), ws, 20, None),
                 (packed, ws[:, :1].contiguous(), 20, None), (packed, ws.double(), 20, None),
                 (packed, ws, 40, None), (packed, ws, 20, bias[:3])):
        with pytest.raises(InvalidParameterError, match="invalid packed="):
            kernel(x, *args)
    with pytest.raises(InvalidParameterError, match="threads"):
        kernel(x, packed, ws, 20, threads=0)


@pytest.mark.parametrize("m", [1, 33, 300])
def test_int4_weight_native_and_fallback_agree(m, monkeypatch):
    """Int4Weight applies itself natively for float32 CPU rows (any count) and by torch
    otherwise (or with no native library); both compute quantize_activations(x) @ W, W (in, out)
    dequantized."""
    g = torch.Generator().manual_seed(m)
    w = torch.randn(48, 70, generator=g)  # (in, out), as the engine stores projections
    x, bias = torch.randn(m, 48, generator=g), torch.randn(70, generator=g)
    iw = Int4Weight.from_in_out(w)
    assert iw.shape == (48, 70)
    xq, wd = quantize_activations(x), iw.dequantized()
    ref = xq.double() @ wd.double().t() + bias.double()
    got = iw.apply_to(x, bias)
    monkeypatch.setattr("metagen.engine.models.int4.load_int4_matmul", lambda: None)
    fallback = iw.apply_to(x, bias)
    # the same quantized activations on both paths (the same elementwise float32 operations),
    # then float32 rounding of the product only: within product_bound (was a fixed 1e-4)
    for y in (got, fallback):
        assert y.dtype == torch.float32
        assert ((y.double() - ref).abs() <= product_bound(xq, wd, bias)).all()
    assert iw.apply_to(x.bfloat16()).dtype == torch.bfloat16


def test_quantize_model_int4_projections_and_a_w8a8_head(random_model_dir):
    folder = random_model_dir("llama")  # untied LM head
    ref = load_model(folder)
    model = load_model(folder, quantization="int4")
    assert quantization_of(model) == "int4"
    for a, b in zip(ref.layers, model.layers):
        for name in PROJECTIONS:
            w, iw = getattr(a, name), getattr(b, name)
            assert isinstance(iw, Int4Weight) and iw.shape == w.shape
            q, scale = quantize_int4(w.t())
            assert torch.equal(iw.dequantized(), dequantize_int4(q, scale))
    assert isinstance(model.lm_head, Int8Weight) and model.lm_head.act8
    tied = load_model(random_model_dir("qwen2"), quantization="int4")
    assert tied.lm_head is None and isinstance(tied.layers[0].qkv, Int4Weight)


def _runner(model, native: bool, isa: str) -> ModelRunner:
    cfg = model.cfg
    kv = KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim, torch.float32,
                 "cpu")
    runner = ModelRunner(model, kv, hydragen=True, native=native)
    if native:
        if runner.native is None:
            pytest.skip("no native library on this machine (no C compiler or vector ISA)")
        if isa != "native":
            runner.native = DecodeStep(open_library(dict(variants())[isa]), model)
    return runner


def _float_activations(model):
    """The same model with float activations: every int4 projection replaced by its dequantized
    float32 weight, the w8a8 head by the same int8 weight-only."""
    for layer in model.layers:
        for name in PROJECTIONS:
            w = getattr(layer, name).dequantized().t().contiguous()  # (in, out)
            delattr(layer, name)
            setattr(layer, name, torch.nn.Parameter(w, requires_grad=False))
    if isinstance(model.lm_head, Int8Weight):
        model.lm_head.act8 = False
    return model


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("isa", [name for name, _ in variants()])
def test_int4_native_steps_equal_pytorch_steps(random_model_dir, kind, isa, monkeypatch):
    """The decode step's int4 products (act8 = 2; this ISA's build) against the PyTorch path's
    torch products of the dequantized weight after the same activation quantization (the
    native int4 and int8 products turned off for it), through the random steps of
    ``test_decode_step`` (decode rows, verification rows, forked prefix groups); the same
    weights with float activations measure what the activation rounding may move."""
    monkeypatch.setattr("metagen.engine.models.int4.load_int4_matmul", lambda: None)
    monkeypatch.setattr("metagen.engine.models.int8.load_int8_matmul", lambda: None)
    folder = random_model_dir(kind)
    model = load_model(folder, quantization="int4")
    reference = _float_activations(load_model(folder, quantization="int4"))
    _check_native_equals_pytorch(_runner(model, True, isa), _runner(model, False, isa), "step",
                                 True, f"int4{kind}{isa}", _runner(reference, False, isa))


def test_engine_decodes_int4_as_its_pytorch_path(stories_path, monkeypatch):
    """End to end on stories260K: greedy tokens of the engine with the native kernels against
    the same engine on the PyTorch path (torch products of the dequantized weight, the same
    activation quantization): the same but for float32 near-ties, after which a sequence
    diverges (measured: 31 of 32 sequences of 32 tokens identical)."""
    g = torch.Generator().manual_seed(0)
    prompts = [[1] + torch.randint(3, 512, (int(k),), generator=g).tolist()
               for k in torch.randint(3, 40, (16,), generator=g)]
    greedy = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    got, want = _native_and_pytorch_greedy(stories_path, "int4", prompts, greedy, monkeypatch)
    assert sum(x == y for x, y in zip(got, want)) >= 12


def _native_and_pytorch_greedy(folder, quantization, prompts, greedy, monkeypatch):
    """Token ids of each prompt from an engine on ``folder`` quantized as ``quantization``:
    with the native kernels, then on the PyTorch path (no native step, torch products of the
    dequantized weights after the same activation quantization)."""
    native = LLMEngine.from_pretrained(folder, device="cpu", quantization=quantization)
    assert native.runner.native is not None
    got = [list(o.outputs[0].token_ids) for o in native.generate(prompts, greedy)]
    plain = LLMEngine.from_pretrained(folder, device="cpu", quantization=quantization)
    plain.runner.native = None
    monkeypatch.setattr("metagen.engine.models.int4.load_int4_matmul", lambda: None)
    monkeypatch.setattr("metagen.engine.models.int8.load_int8_matmul", lambda: None)
    want = [list(o.outputs[0].token_ids) for o in plain.generate(prompts, greedy)]
    return got, want


def test_int4_projections_share_one_huge_page_arena(random_model_dir):
    from metagen.engine.models.weight_arena import ALIGN

    model = load_model(random_model_dir("llama"), quantization="int4")
    packed = [getattr(layer, n).packed for layer in model.layers for n in PROJECTIONS]
    assert isinstance(model.lm_head, Int8Weight)
    stores = {t.untyped_storage().data_ptr() for t in [*packed, model.lm_head.q]}
    assert len(stores) == 1
    assert all(t.dtype == torch.uint8 and t.is_contiguous() and t.data_ptr() % ALIGN == 0
               for t in packed)
    assert model.lm_head.q.dtype == torch.int8 and model.lm_head.q.data_ptr() % ALIGN == 0


def test_int4_all_stores_the_untied_head_in_int4_too(random_model_dir):
    folder = random_model_dir("llama")  # untied LM head
    ref, int4 = load_model(folder), load_model(folder, quantization="int4")
    model = load_model(folder, quantization="int4-all")
    assert quantization_of(model) == "int4-all" and stores(model, "int4-all")
    assert not stores(model, "int4") and not stores(int4, "int4-all")
    for a, b in zip(int4.layers, model.layers):  # the layers are int4's, bit for bit
        for name in PROJECTIONS:
            assert torch.equal(getattr(a, name).packed, getattr(b, name).packed)
    assert isinstance(model.lm_head, Int4Weight) and model.lm_head.shape == ref.lm_head.shape
    q, scale = quantize_int4(ref.lm_head.t())
    assert torch.equal(model.lm_head.dequantized(), dequantize_int4(q, scale))
    packed = [getattr(layer, n).packed for layer in model.layers for n in PROJECTIONS]
    assert len({t.untyped_storage().data_ptr() for t in [*packed, model.lm_head.packed]}) == 1
    # the engine takes it as "int4-all" only, and refuses to call it "int4"
    LLMEngine(model, config=EngineConfig(quantization="int4-all", num_blocks=8))
    with pytest.raises(InvalidParameterError, match="quantization"):
        LLMEngine(model, config=EngineConfig(quantization="int4", num_blocks=8))
    # a tied head is the embedding table, as loaded by both: the same storage as "int4"
    tied = load_model(random_model_dir("qwen2"), quantization="int4-all")
    assert tied.lm_head is None and quantization_of(tied) == "int4"
    assert stores(tied, "int4-all") and stores(tied, "int4")


def test_engine_decodes_int4_all_as_its_pytorch_path(random_model_dir, monkeypatch):
    """Greedy tokens of an "int4-all" engine with the native kernels (the head's product on
    the pool) against the same engine on the PyTorch path (torch products of the dequantized
    weights after the same activation quantization): the two differ only in float32 summation
    order, so a sequence may leave the other only at a near-tie (random weights at the loader's
    scale: measured all 8 of 8 sequences the same)."""
    folder = random_model_dir("llama")
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 96, (int(k),), generator=g).tolist()  # vocabulary 96
               for k in torch.randint(2, 30, (8,), generator=g)]
    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    assert isinstance(load_model(folder, quantization="int4-all").lm_head, Int4Weight)
    got, want = _native_and_pytorch_greedy(folder, "int4-all", prompts, greedy, monkeypatch)
    assert sum(x == y for x, y in zip(got, want)) >= 6
