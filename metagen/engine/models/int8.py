"""Weight-only int8: symmetric quantization with one float32 scale per output channel.

For a weight ``w`` (out, in): ``scale[n] = max_k |w[n, k]| / 127`` and
``q[n, k] = round(w[n, k] / scale[n])`` in [-127, 127], so the dequantized weight
``q[n, k] * scale[n]`` is within ``scale[n] / 2`` of ``w[n, k]`` (a relative error of at most
1/254 of the channel's largest magnitude). A channel of zeros gets scale 0 and q 0, and
dequantizes to exact zeros. Activations stay float32: products compute
``(x @ q^T) * scale``, the scale applied once per output element.

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


def dequantized_product(x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                        bias: torch.Tensor | None = None) -> torch.Tensor:
    """x (T, in) @ q (out, in)^T * scale (out,) [+ bias (out,)] in x's dtype and on its device,
    by torch: the weight is converted to x's dtype for the call (a transient copy of 4 bytes per
    weight in float32), the scale applied to the product. Any shape, dtype and device."""
    y = torch.mm(x, q.to(x.dtype).t()) * scale.to(x.dtype)
    return y if bias is None else y + bias.to(x.dtype)


class Int8Weight(nn.Module):
    """A projection quantized to int8: buffers ``q`` (out, in) int8 and ``scale`` (out,) float32.

    Stands where a float ``(in, out)`` projection was; :meth:`apply` computes what ``x @ W``
    computed, with the dequantized weight."""

    q: torch.Tensor
    scale: torch.Tensor

    def __init__(self, q: torch.Tensor, scale: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)

    @classmethod
    def from_in_out(cls, w: torch.Tensor) -> Int8Weight:
        """Quantize an engine projection stored ``(in, out)`` (per output channel: a column)."""
        q, scale = quantize_int8(w.t())
        return cls(q.to(w.device), scale.to(w.device))

    @property
    def shape(self) -> tuple[int, int]:
        """``(in, out)``, as the float projection it replaces."""
        return self.q.shape[1], self.q.shape[0]

    def apply_to(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x (T, in) -> x @ dequantized (in, out) [+ bias (out,)], in x's dtype. Natively for
        the kernel's rows (:meth:`~metagen.engine.native.int8_matmul.Int8Matmul.applies`: 1-16
        contiguous float32 CPU rows, 1-32 with AVX-512; a float32 bias), else by
        :func:`dequantized_product`."""
        kernel: Int8Matmul | None = load_int8_matmul()
        if (kernel is not None and kernel.applies(x) and self.q.device.type == "cpu"
                and self.scale.dtype == torch.float32
                and (bias is None or bias.dtype == torch.float32)):
            return kernel(x, self.q, self.scale, bias)
        return dequantized_product(x, self.q, self.scale, bias)
