"""Weight-only int8: symmetric quantization with one float32 scale per output channel.

For a weight ``w`` (out, in): ``scale[n] = max_k |w[n, k]| / 127`` and
``q[n, k] = round(w[n, k] / scale[n])`` in [-127, 127], so the dequantized weight
``q[n, k] * scale[n]`` is within ``scale[n] / 2`` of ``w[n, k]`` (a relative error of at most
1/254 of the channel's largest magnitude). A channel of zeros gets scale 0 and q 0, and
dequantizes to exact zeros. Activations stay float32 (``quantization="int8"``): products
compute ``(x @ q^T) * scale``, the scale applied once per output element. With
``quantization="w8a8"`` the activations are quantized too, per row and block of
:data:`ACT_BLOCK` values (:func:`quantize_activations`), and the native kernel multiplies int8 by
int8; each product then differs from the weight-only one by at most
``scale[n] * sum_b d_b / 2 * sum_{k in b} |q[n, k]|`` (``d_b`` the block's activation scale).

:class:`Int8Weight` holds a quantized projection and applies it: natively for 1-16 float32 rows
on the CPU (1-32 with AVX-512: :mod:`metagen.engine.native.int8_matmul`), else by a dequantized
torch product, so every shape, dtype and device works.
"""

from __future__ import annotations

import torch
from torch import nn

from metagen.engine.native.int8_matmul import Int8Matmul
from metagen.engine.native.int8_matmul import load as load_int8_matmul
from metagen.errors import InvalidParameterError

QMAX = 127
ACT_BLOCK = 32  # activation values per scale, as the native kernel (q8_act.c)


def quantize_int8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (out, in), any float dtype -> (q (out, in) int8, scale (out,) float32) as in the module
    docstring: ``|q * scale[:, None] - w| <= scale[:, None] / 2`` elementwise (up to float32
    rounding of ``w``). Raises :class:`~metagen.errors.InvalidParameterError` naming ``w`` for a
    tensor that is not 2-D or holds a non-finite value (its channel has no finite scale)."""
    if w.dim() != 2 or not w.is_floating_point():
        raise InvalidParameterError("w", (tuple(w.shape), w.dtype), "must be a 2-D float tensor")
    w32 = w.detach().float()
    if not bool(torch.isfinite(w32).all()):
        raise InvalidParameterError("w", tuple(w.shape), "holds a NaN or infinite value")
    scale = w32.abs().amax(dim=1) / QMAX
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w32 / safe[:, None]).clamp_(-QMAX, QMAX).to(torch.int8)
    return q.contiguous(), scale.contiguous()


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight (out, in) in ``dtype`` that ``q`` (out, in) int8 and ``scale`` (out,) stand
    for: ``q * scale[:, None]``."""
    return (q.float() * scale.float()[:, None]).to(dtype)


def quantize_activations(x: torch.Tensor) -> torch.Tensor:
    """x (T, in) float -> the float32 values the int8-activation kernel multiplies: per row and
    block of :data:`ACT_BLOCK` values (the last one may be shorter), ``d = max |x| / 127`` and
    ``round(x * (1 / d)) * d`` (ties to even, in float32); ``|result - x| <= d / 2``. A block of
    zeros stays zeros; a block holding a NaN or an infinity becomes NaN."""
    x32 = x.float()
    t, k = x32.shape
    pad = -k % ACT_BLOCK
    blocks = torch.nn.functional.pad(x32, (0, pad)).view(t, -1, ACT_BLOCK)
    d = blocks.abs().amax(dim=2, keepdim=True) / QMAX
    finite = torch.isfinite(blocks).all(dim=2, keepdim=True)
    d = torch.where(finite, d, torch.full_like(d, float("nan")))
    inv = torch.where(d > 0, 1 / d, torch.zeros_like(d))
    q = torch.round(torch.nan_to_num(blocks * inv, nan=0.0)).clamp_(-QMAX, QMAX)
    return (q * d).view(t, -1)[:, :k]


def dequantized_product(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (T, in) @ q (out, in)^T * scale (out,) [+ bias (out,)] in x's dtype and on its device,
    by torch: the weight is converted to x's dtype for the call (a transient copy of 4 bytes per
    weight in float32), the scale applied to the product. Any shape, dtype and device."""
    y = torch.mm(x, q.to(x.dtype).t()) * scale.to(x.dtype)
    return y if bias is None else y + bias.to(x.dtype)


class Int8Weight(nn.Module):
    """A projection quantized to int8: buffers ``q`` (out, in) int8 and ``scale`` (out,) float32,
    and ``act8``: whether its activations are quantized too (``"w8a8"``).

    Stands where a float ``(in, out)`` projection was; :meth:`apply_to` computes what ``x @ W``
    computed, with the dequantized weight (and, with ``act8``, :func:`quantize_activations`'
    x)."""

    q: torch.Tensor
    scale: torch.Tensor

    def __init__(self, q: torch.Tensor, scale: torch.Tensor, act8: bool = False) -> None:
        super().__init__()
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)
        self.act8 = act8

    @classmethod
    def from_in_out(cls, w: torch.Tensor, act8: bool = False) -> Int8Weight:
        """Quantize an engine projection stored ``(in, out)`` (per output channel: a column)."""
        q, scale = quantize_int8(w.t())
        return cls(q.to(w.device), scale.to(w.device), act8)

    @property
    def shape(self) -> tuple[int, int]:
        """``(in, out)``, as the float projection it replaces."""
        return self.q.shape[1], self.q.shape[0]

    def native_kernel(self, x: torch.Tensor, bias: torch.Tensor | None = None
                      ) -> Int8Matmul | None:
        """The native kernel :meth:`apply_to` runs ``(x, bias)`` with, or None (then torch)."""
        kernel: Int8Matmul | None = load_int8_matmul()
        if (kernel is not None and kernel.applies(x, self.act8) and self.q.device.type == "cpu"
                and self.scale.dtype == torch.float32
                and (bias is None or bias.dtype == torch.float32)):
            return kernel
        return None

    def apply_to(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x (T, in) -> x @ dequantized (in, out) [+ bias (out,)], in x's dtype (with ``act8``,
        :func:`quantize_activations` (x) @ ...). Natively for the kernel's rows
        (:meth:`~metagen.engine.native.int8_matmul.Int8Matmul.applies`: 1-16 contiguous float32
        CPU rows, 1-32 with AVX-512, any number with ``act8`` on a VNNI build; a float32 bias),
        else by :func:`dequantized_product`."""
        kernel = self.native_kernel(x, bias)
        if kernel is not None:
            return kernel(x, self.q, self.scale, bias, quantize_activations=self.act8)
        if self.act8:
            x = quantize_activations(x).to(x.dtype)
        return dequantized_product(x, self.q, self.scale, bias)
