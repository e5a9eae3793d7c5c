"""Rounding bounds for tests that compare a float32 product against a float64 reference.

A float32 sum of K products, in any order and with or without fused multiply-adds (the order is
what differs between the native kernels' AVX-512 and AVX2 paths, their thread splits, MKL and
ATen), is within gamma_K * sum_i |x_i * w_i| of the exact sum, gamma_n = n u / (1 - n u) and
u = 2^-24 the float32 unit roundoff (Higham, Accuracy and Stability of Numerical Algorithms,
section 3.1). Each further float32 operation on the result (a scale, a bias, the rounding of a
dequantized weight) adds one more u to that, so n = K + 3 covers ``(x @ q^T) * scale + bias``.
This holds on every CPU, unlike a fixed absolute bound measured on one.
"""

from __future__ import annotations

import torch

U = 2.0 ** -24


def gamma(n: int) -> float:
    """gamma_n = n u / (1 - n u) for float32."""
    return n * U / (1 - n * U)


def product_bound(x: torch.Tensor, w: torch.Tensor,
                  bias: torch.Tensor | None = None) -> torch.Tensor:
    """(T, N) elementwise bound on |float32 (x @ w^T + bias) - exact| for x (T, K) and w (N, K)
    as the float32 operands the product multiplies: gamma_{K+3} * (|x| @ |w|^T + |bias|)."""
    mag = x.double().abs() @ w.double().abs().t()
    if bias is not None:
        mag = mag + bias.double().abs()
    return gamma(x.shape[-1] + 3) * mag
