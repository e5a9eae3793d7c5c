"""int8 activations x int8 weights (``quantization="w8a8"``): the activation quantizer's bound,
the native int8 x int8 product (both vector paths) against float64 products, its error bound
against the unquantized activations, thread-count independence, and the torch fallback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.models.int8 import (
    ACT_BLOCK,
    Int8Weight,
    dequantize_int8,
    quantize_activations,
)

from ._bounds import product_bound
from .test_int8_kernel import _case, kernel  # noqa: F401  (the int8 kernel on each vector path)


def _block_scales(x: torch.Tensor) -> torch.Tensor:
    """(T, K) -> (T, K): each value's block scale d = max |x| / 127 over its block of 32."""
    t, k = x.shape
    pad = -k % ACT_BLOCK
    blocks = torch.nn.functional.pad(x.double().abs(), (0, pad)).view(t, -1, ACT_BLOCK)
    d = blocks.amax(dim=2, keepdim=True) / 127
    return d.expand_as(blocks).reshape(t, -1)[:, :k]


@settings(max_examples=60, deadline=None)
@given(t=st.integers(1, 6), k=st.integers(1, 100), spread=st.sampled_from([1e-3, 1.0, 1e3]),
       seed=st.integers(0, 2**16))
def test_activations_within_half_a_step_per_block(t, k, spread, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, k, generator=g) * spread
    xq = quantize_activations(x)
    d = _block_scales(x)
    assert xq.shape == x.shape and xq.dtype == torch.float32
    assert ((xq.double() - x.double()).abs() <= d / 2 * (1 + 1e-5)).all()
    steps = xq.double() / torch.where(d > 0, d, torch.ones_like(d))  # integers in [-127, 127]
    assert (steps - steps.round()).abs().max() < 1e-3 and steps.abs().max() <= 127 + 1e-3


def test_zero_and_non_finite_blocks():
    x = torch.zeros(2, 40)
    x[1, 3] = float("nan")
    x[1, 35] = 1.0
    xq = quantize_activations(x)
    assert torch.equal(xq[0], torch.zeros(40))
    assert xq[1, :32].isnan().all() and torch.equal(xq[1, 32:], x[1, 32:])


# M crosses the 4/2-row register tile and the kernel's most rows (16 or 32); K the 64/32-byte
# vector and the 32-value block (tails of every kind), N the 4/3-channel tile and the thread
# slices.
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 40), k=st.sampled_from([1, 3, 31, 32, 33, 63, 64, 65, 100, 129, 512]),
       n=st.sampled_from([1, 2, 3, 4, 5, 16, 23, 65, 130]), with_bias=st.booleans(),
       spread=st.sampled_from([1e-2, 1.0, 1e2]), seed=st.integers(0, 2**16))
def test_product_within_its_error_bound(kernel, m, k, n, with_bias, spread, seed):
    """Against float64 with the quantized activations: float32 rounding only. Against float64
    with x itself: within ``scale[n] * sum_b d_b / 2 * sum_{k in b} |q[n, k]|``, the bound the
    activation quantization promises (|x - dequant(x)| <= d_b / 2 per value)."""
    x, q, scale, bias = _case(m, k, n, seed)
    x = x * spread
    b = bias if with_bias else None
    got = kernel(x, q, scale, b, quantize_activations=True).double()
    w = dequantize_int8(q, scale).double()  # (n, k)
    plus = bias.double() if with_bias else 0
    ref_q = quantize_activations(x).double() @ w.t() + plus
    # float32 sums of the blocks in another order: a few ulps of sum |x_i w_i|
    rounding = 1e-6 * (x.double().abs() @ w.abs().t() + (bias.double().abs() if with_bias else 0)
                       + 1)
    assert ((got - ref_q).abs() <= 8 * rounding).all()
    exact = x.double() @ w.t() + plus
    bound = (_block_scales(x) / 2) @ w.abs().t()
    assert ((got - exact).abs() <= bound + 8 * rounding).all()


@pytest.mark.parametrize("m", [1, 2, 5, 7, 16, 32])
@pytest.mark.parametrize("n", [8, 40, 130, 1001])
def test_threaded_product_equals_one_thread_bitwise(kernel, m, n):
    x, q, scale, bias = _case(m, 65, n, m * 10_000 + n)
    for b in (None, bias):
        ref = kernel(x, q, scale, b, threads=1, quantize_activations=True)
        for t in (2, 3, 4):
            got = kernel(x, q, scale, b, threads=t, quantize_activations=True)
            assert torch.equal(got, ref), (t, b is None)


def test_rows_are_independent_and_a_non_finite_row_stays_its_own(kernel):
    """A row's result does not depend on the rows beside it (so a batch decodes as its rows
    alone), and a NaN or infinity makes its own row NaN, no other."""
    x, q, scale, bias = _case(9, 100, 37, 3)
    whole = kernel(x, q, scale, bias, quantize_activations=True)
    for r in range(9):
        assert torch.equal(kernel(x[r:r + 1], q, scale, bias, quantize_activations=True),
                           whole[r:r + 1])
    x[4, 50] = float("inf")
    x[6, 2] = float("nan")
    y = kernel(x, q, scale, bias, quantize_activations=True)
    assert y[4].isnan().all() and y[6].isnan().all()
    assert torch.equal(y[[0, 1, 2, 3, 5, 7, 8]], whole[[0, 1, 2, 3, 5, 7, 8]])


@pytest.mark.parametrize("m", [1, 16, 33, 300])
def test_act8_weight_native_and_fallback_agree(m, monkeypatch):
    """An ``act8`` Int8Weight quantizes its activations on every path: natively for the kernel's
    rows, by :func:`quantize_activations` and a dequantized torch product otherwise."""
    g = torch.Generator().manual_seed(m)
    w = torch.randn(48, 70, generator=g)  # (in, out), as the engine stores projections
    x, bias = torch.randn(m, 48, generator=g), torch.randn(70, generator=g)
    iw = Int8Weight.from_in_out(w, act8=True)
    xq, wd = quantize_activations(x), dequantize_int8(iw.q, iw.scale)
    ref = xq.double() @ wd.double().t() + bias.double()
    got = iw.apply_to(x, bias)
    monkeypatch.setattr("metagen.engine.models.int8.load_int8_matmul", lambda: None)
    fallback = iw.apply_to(x, bias)
    # Both paths quantize the activations with the same float32 operations (d = amax / 127,
    # round(x * (1 / d)), elementwise, so the same bits on any ISA: the same quantized state),
    # then differ from the float64 product by float32 rounding only (was a fixed 1e-4)
    for y in (got, fallback):
        assert y.dtype == torch.float32
        assert ((y.double() - ref).abs() <= product_bound(xq, wd, bias)).all()


@pytest.mark.parametrize("k", [1, 31, 32, 64, 65, 512, 1000])
@pytest.mark.parametrize("n", [7, 16, 33, 100])
def test_one_row_equals_integer_arithmetic(kernel, k, n):
    """Activations the quantizer keeps as they are (integers in [-127, 127], each block of 32
    holding a +-127, so its scale is 1 and q = x): the one-row product (16/8 channels at a
    time, the rest in tiles) equals NumPy's int64 product, scaled and plus bias, exactly."""
    g = torch.Generator().manual_seed(k * 1000 + n)
    x = torch.randint(-127, 128, (1, k), generator=g).float()
    x[0, ::ACT_BLOCK] = 127.0
    q = torch.randint(-127, 128, (n, k), generator=g, dtype=torch.int8)
    scale = 2.0 ** torch.randint(-9, -5, (n,), generator=g).float()
    bias = torch.randint(-50, 51, (n,), generator=g).float()
    dot = x.numpy().astype(np.int64) @ q.numpy().astype(np.int64).T  # (1, n), |.| < 2**24
    ref = (dot * scale.numpy() + bias.numpy()).astype(np.float32)
    assert np.array_equal(kernel(x, q, scale, bias, quantize_activations=True).numpy(), ref)
