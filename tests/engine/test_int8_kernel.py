"""Weight-only int8: the quantize/dequantize round trip and its bound, the native int8 product
(both vector paths) against a float64 torch product with the dequantized weight, bit-equal on
1-4 threads, and the torch fallback of :class:`Int8Weight` against the kernel."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.models.int8 import Int8Weight, dequantize_int8, quantize_int8
from metagen.engine.native import int8_matmul as im
from metagen.engine.native.int8_matmul import Int8Matmul
from metagen.engine.native.library import open_library
from metagen.errors import InvalidParameterError

from ._bounds import product_bound
from ._native_variants import load_variant, variants


@settings(max_examples=60, deadline=None)
@given(out=st.integers(1, 40), n_in=st.integers(1, 70), spread=st.sampled_from([1e-3, 1.0, 1e3]),
       seed=st.integers(0, 2**16))
def test_round_trip_within_half_a_step_per_channel(out, n_in, spread, seed):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n_in, generator=g) * spread * torch.rand(out, 1, generator=g)
    q, scale = quantize_int8(w)
    assert q.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (out,)
    assert int(q.abs().max()) <= 127
    # each channel's largest magnitude is exactly +-127 steps
    assert torch.equal(q.abs().amax(dim=1), torch.full((out,), 127, dtype=torch.int8))
    err = (dequantize_int8(q, scale).double() - w.double()).abs()
    step = scale.double()[:, None]
    assert (err <= step / 2 * (1 + 1e-5) + 1e-30).all()
    assert torch.allclose(scale.double(), w.double().abs().amax(dim=1) / 127, rtol=1e-6)


def test_zero_channels_dequantize_to_exact_zeros():
    w = torch.tensor([[0.0, 0.0, 0.0], [1.0, -0.5, 0.25]])
    q, scale = quantize_int8(w)
    assert scale[0] == 0 and torch.equal(q[0], torch.zeros(3, dtype=torch.int8))
    assert torch.equal(q[1], torch.tensor([127, -64, 32], dtype=torch.int8))  # round half even
    assert torch.equal(dequantize_int8(q, scale)[0], torch.zeros(3))


def test_quantize_rejects_bad_weights():
    for bad in (torch.ones(3), torch.ones(2, 2, dtype=torch.int32),
                torch.tensor([[1.0, float("nan")]]), torch.tensor([[float("inf"), 1.0]])):
        with pytest.raises(InvalidParameterError, match="invalid w="):
            quantize_int8(bad)


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def kernel(request, tmp_path_factory) -> Int8Matmul:
    return load_variant(im.load_from, request.param, tmp_path_factory)


def _case(m: int, k: int, n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q, scale = quantize_int8(torch.randn(n, k, generator=g))
    return torch.randn(m, k, generator=g), q, scale, torch.randn(n, generator=g)


# M crosses the 6/4-row register tile and the most rows the engine gives the kernel (16 or 32), K
# the 16/8-lane vector (scalar tail), N the 4/3-channel tile (repeated-row tail) and the
# 16-column thread slices.
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 40), k=st.sampled_from([1, 3, 8, 16, 17, 40, 129, 512]),
       n=st.sampled_from([1, 2, 3, 4, 5, 16, 23, 65, 130, 1001]), with_bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_kernel_equals_the_dequantized_product(kernel, m, k, n, with_bias, seed):
    x, q, scale, bias = _case(m, k, n, seed)
    b = bias if with_bias else None
    got = kernel(x, q, scale, b)
    w = dequantize_int8(q, scale).double()  # (n, k)
    ref = x.double() @ w.t() + (bias.double() if with_bias else 0)
    assert got.shape == (m, n) and got.dtype == torch.float32
    # float32 sums of k products in another order: a few ulps of sum |x_i w_i|
    bound = 1e-6 * (x.double().abs() @ w.abs().t() + (bias.double().abs() if with_bias else 0)
                    + 1)
    assert ((got.double() - ref).abs() <= bound * 8).all()


@pytest.mark.parametrize("m", [1, 2, 5, 7, 16])
@pytest.mark.parametrize("n", [8, 40, 130, 1001])
def test_threaded_product_equals_one_thread_bitwise(kernel, m, n):
    x, q, scale, bias = _case(m, 37, n, m * 10_000 + n)
    for b in (None, bias):
        ref = kernel(x, q, scale, b, threads=1)
        for t in (2, 3, 4):
            assert torch.equal(kernel(x, q, scale, b, threads=t), ref), (t, b is None)


def test_kernel_rejects_operands_that_do_not_fit(kernel):
    x, q, scale, bias = _case(2, 8, 5, 0)
    for args in ((q[:, :7].contiguous(), scale, None), (q.float(), scale, None),
                 (q, scale[:4], None), (q, scale.double(), None), (q, scale, bias[:3])):
        with pytest.raises(InvalidParameterError, match="invalid q="):
            kernel(x, *args)
    with pytest.raises(InvalidParameterError, match="threads"):
        kernel(x, q, scale, threads=0)


def test_applies_to_a_few_contiguous_float32_rows(kernel):
    cap = kernel.max_rows
    assert cap == {512: 32, 256: 16}[kernel.isa]
    assert kernel.applies(torch.randn(1, 8)) and kernel.applies(torch.randn(cap, 8))
    assert not kernel.applies(torch.randn(cap + 1, 8))  # prefill: the torch fallback
    assert not kernel.applies(torch.randn(0, 8))
    assert not kernel.applies(torch.randn(4, 8).double())
    assert not kernel.applies(torch.randn(8, 4).t())
    assert not kernel.applies(torch.randn(4, 8, requires_grad=True))
    # w8a8 on a VNNI build: prefill too (integer products past the float32 multiply rate)
    assert kernel.applies(torch.randn(cap + 1, 8), act8=True) == kernel.vnni
    assert kernel.applies(torch.randn(cap, 8), act8=True)


@pytest.mark.parametrize("m", [1, 16, 17, 32, 33, 40])
def test_int8_weight_native_and_fallback_agree(m, monkeypatch):
    """Int8Weight applies itself natively for the kernel's rows (1-16, 1-32 with AVX-512) and by
    a dequantized torch product otherwise (or with no native library): both compute ``x @ W``
    with W (in, out) dequantized."""
    g = torch.Generator().manual_seed(m)
    w = torch.randn(48, 70, generator=g)  # (in, out), as the engine stores projections
    x, bias = torch.randn(m, 48, generator=g), torch.randn(70, generator=g)
    iw = Int8Weight.from_in_out(w)
    assert iw.shape == (48, 70) and iw.q.shape == (70, 48)
    wd = dequantize_int8(iw.q, iw.scale)
    ref = x.double() @ wd.double().t() + bias.double()
    got = iw.apply_to(x, bias)
    monkeypatch.setattr("metagen.engine.models.int8.load_int8_matmul", lambda: None)
    fallback = iw.apply_to(x, bias)
    # both paths multiply the same int8 weight and scale: they differ from the float64 product by
    # float32 rounding only, within product_bound (was a fixed 1e-4)
    for y in (got, fallback):
        assert y.dtype == torch.float32
        assert ((y.double() - ref).abs() <= product_bound(x, wd, bias)).all()
    # bfloat16 activations take the fallback and stay bfloat16
    assert iw.apply_to(x.bfloat16()).dtype == torch.bfloat16


@pytest.mark.parametrize("isa", [name for name, _ in variants()])
def test_column_slices_computed_apart_equal_the_whole_product(isa):
    """The per-slice function the decode step calls: slices of output channels that do not
    align with the 4/3-channel tile, computed apart, equal the whole product bit for bit."""
    try:
        lib = open_library(dict(variants())[isa])
    except Exception as e:  # no compiler or no vector path
        pytest.skip(f"no native {isa} library: {e}")
    x, q, scale, bias = _case(7, 40, 50, 7)
    y = torch.empty(7, 50)
    p, i = ctypes.c_void_p, ctypes.c_int64
    lib.mg_q8_matmul_cols.argtypes = [p, p, p, p, p, i, i, i, i, i]
    lib.mg_q8_matmul_cols.restype = None
    for c0, c1 in ((0, 17), (17, 17), (17, 33), (33, 50)):
        lib.mg_q8_matmul_cols(x.data_ptr(), q.data_ptr(), scale.data_ptr(), bias.data_ptr(),
                              y.data_ptr(), 7, 40, 50, c0, c1)
    assert torch.equal(y, Int8Matmul(lib)(x, q, scale, bias, threads=1))


def _exact_case(m: int, k: int, n: int, seed: int):
    """Operands whose product float32 computes exactly in any order: integer x in [-7, 7],
    scales powers of two, integer bias (every partial sum an integer below 2**24)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-7, 8, (m, k), generator=g).float()
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = 2.0 ** torch.randint(-3, 2, (n,), generator=g).float()
    bias = torch.randint(-50, 51, (n,), generator=g).float()
    return x, q, scale, bias


# N covers the one-row kernel's groups of 16/8 channels and the channels left to the tiles; K
# its vector body and the scalar tail.
@pytest.mark.parametrize("k", [1, 15, 16, 17, 512, 1000])
@pytest.mark.parametrize("n", [7, 16, 33, 100])
def test_one_row_equals_integer_arithmetic_and_its_row_in_a_batch(kernel, k, n):
    """Exact where the arithmetic is: the one-row product equals NumPy's int64 product (scaled,
    plus bias) exactly, and any row computed alone equals the same row inside a batch (the
    tiles) bit for bit, on random float operands too."""
    x, q, scale, bias = _exact_case(3, k, n, k * 1000 + n)
    dot = x.numpy().astype(np.int64) @ q.numpy().astype(np.int64).T  # (3, n), exact
    ref = (dot * scale.numpy() + bias.numpy()).astype(np.float32)
    for r in range(3):
        assert np.array_equal(kernel(x[r:r + 1], q, scale, bias).numpy()[0], ref[r])
    x, q, scale, bias = _case(3, k, n, k + n)
    for b in (None, bias):
        whole = kernel(x, q, scale, b)
        for r in range(3):
            assert torch.equal(kernel(x[r:r + 1], q, scale, b), whole[r:r + 1]), (r, b is None)
