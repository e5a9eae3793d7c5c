"""int4 weights with group scales (``quantization="int4"``): Q4_0's rule and granularity.

For a weight ``w`` (out, in), each output channel ``n`` and block ``b`` of :data:`GROUP`
consecutive inputs (the last may be shorter) get ``scale[n, b] = e / -8``, ``e`` the block's value
of largest magnitude (signed), and ``q[n, k] = round(w[n, k] / scale[n, b])`` clamped to [-8, 7]:
all 16 levels are used and ``e`` itself is exactly -8 steps. The dequantized weight is within
``|scale| / 2`` of ``w`` except for a value within half a step of ``-e``, clamped to 7 steps, so
within ``|scale|`` (1/8 of the block's largest magnitude). A block of zeros gets scale 0 and
dequantizes to exact zeros. (Symmetric 15 levels, ``max |w| / 7``, measured worse: on the
testbed's 500 problems greedy -1.0 against +0.2 points from float32, and on stories260K 376
against 416 of 512 greedy next tokens equal to float32's.)

Activations are quantized per row and block of 32 as ``w8a8``'s are
(:func:`~metagen.engine.models.int8.quantize_activations`), and the native kernel
(``native/q4.c``) multiplies int8 activations by int4 weights as integers, for decode steps and
prefill alike; elsewhere (other devices and dtypes, no native library) the same quantized
activations meet the dequantized weight in a torch product, equal up to float32 rounding.

:class:`Int4Weight` keeps the weight packed as the kernel reads it (two weights a byte, groups of
16 output channels interleaved four inputs at a time: the layout is ``q4.c``'s), half the bytes
of int8 and an eighth of float32's.
"""

from __future__ import annotations

import torch
from torch import nn

from metagen.engine.models.int8 import quantize_activations
from metagen.engine.native.int4_matmul import CHANNELS, GROUP, Int4Matmul
from metagen.engine.native.int4_matmul import load as load_int4_matmul
from metagen.errors import InvalidParameterError

QMIN, QMAX = -8, 7


def quantize_int4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w (out, in), any float dtype -> (q (out, in) int8 in [-8, 7], scale (out, ceil(in / 32))
    float32, possibly negative) as in the module docstring:
    ``|q * scale[:, k // 32] - w| <= |scale|`` (``|scale| / 2`` where q < 7). Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``w`` for a tensor that is not 2-D
    float or holds a non-finite value."""
    if w.dim() != 2 or not w.is_floating_point():
        raise InvalidParameterError("w", (tuple(w.shape), w.dtype), "must be a 2-D float tensor")
    w32 = w.detach().float()
    if not bool(torch.isfinite(w32).all()):
        raise InvalidParameterError("w", tuple(w.shape), "holds a NaN or infinite value")
    n, k = w32.shape
    blocks = nn.functional.pad(w32, (0, -k % GROUP)).view(n, -1, GROUP)
    extreme = blocks.gather(2, blocks.abs().argmax(dim=2, keepdim=True))[..., 0]
    scale = extreme / QMIN  # (out, blocks)
    safe = torch.where(scale != 0, scale, torch.ones_like(scale))
    q = torch.round(blocks / safe[:, :, None]).clamp_(QMIN, QMAX).to(torch.int8)
    return q.view(n, -1)[:, :k].contiguous(), scale.contiguous()


def dequantize_int4(q: torch.Tensor, scale: torch.Tensor,
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight (out, in) that ``q`` (out, in) and ``scale`` (out, blocks) stand for."""
    k = q.shape[1]
    return (q.float() * scale.float().repeat_interleave(GROUP, dim=1)[:, :k]).to(dtype)


def pack_int4(q: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q (N, K) int8 in [-8, 7], scale (N, ceil(K / 32))) -> (packed uint8 (bytes,), scales
    float32 (groups, blocks, 16)) in ``q4.c``'s layout; padding channels and inputs hold
    q = 0 and scale 0."""
    n, k = q.shape
    blocks = scale.shape[1]
    n16, k32 = -n % CHANNELS, blocks * GROUP - k
    u = (nn.functional.pad(q.to(torch.int16), (0, k32, 0, n16)) + 8).to(torch.uint8)
    groups = u.shape[0] // CHANNELS
    # (group, channel, chunk, half, i) -> (group, chunk, channel, i, half)
    u = u.view(groups, CHANNELS, blocks * GROUP // 8, 2, 4).permute(0, 2, 1, 4, 3)
    packed = (u[..., 0] | (u[..., 1] << 4)).contiguous().view(-1)
    ws = nn.functional.pad(scale.float(), (0, 0, 0, n16)).view(groups, CHANNELS, blocks)
    return packed, ws.transpose(1, 2).contiguous()


def unpack_int4(packed: torch.Tensor, ws: torch.Tensor, n: int, k: int
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`pack_int4`'s inverse: (q (n, k) int8, scale (n, blocks) float32)."""
    groups, blocks, _ = ws.shape
    p = packed.view(groups, blocks * GROUP // 8, CHANNELS, 4)
    u = torch.stack([p & 0x0F, p >> 4], dim=-1)  # (group, chunk, channel, i, half)
    u = u.permute(0, 2, 1, 4, 3).reshape(groups * CHANNELS, blocks * GROUP)
    q = (u.to(torch.int16) - 8).to(torch.int8)[:n, :k].contiguous()
    return q, ws.transpose(1, 2).reshape(groups * CHANNELS, blocks)[:n].contiguous()


class Int4Weight(nn.Module):
    """A projection quantized to int4 with group scales: buffers ``packed`` (uint8) and ``ws``
    (float32 (groups, blocks, 16)), ``q4.c``'s layout, for an ``(in, out)`` projection of
    :attr:`shape`.

    Stands where a float ``(in, out)`` projection was; :meth:`apply_to` computes what ``x @ W``
    computed, with the dequantized weight and :func:`quantize_activations`' x."""

    packed: torch.Tensor
    ws: torch.Tensor

    def __init__(self, packed: torch.Tensor, ws: torch.Tensor, in_features: int,
                 out_features: int) -> None:
        super().__init__()
        self.register_buffer("packed", packed)
        self.register_buffer("ws", ws)
        self.in_features, self.out_features = in_features, out_features

    @classmethod
    def from_in_out(cls, w: torch.Tensor) -> Int4Weight:
        """Quantize an engine projection stored ``(in, out)`` (per output channel: a column)."""
        q, scale = quantize_int4(w.t())
        packed, ws = pack_int4(q, scale)
        return cls(packed.to(w.device), ws.to(w.device), w.shape[0], w.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(in, out)``, as the float projection it replaces."""
        return self.in_features, self.out_features

    def dequantized(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The weight (out, in) the packed one stands for."""
        q, scale = unpack_int4(self.packed, self.ws, self.out_features, self.in_features)
        return dequantize_int4(q, scale, dtype)

    def native_kernel(self, x: torch.Tensor, bias: torch.Tensor | None = None
                      ) -> Int4Matmul | None:
        """The native kernel :meth:`apply_to` runs ``(x, bias)`` with, or None (then torch)."""
        kernel: Int4Matmul | None = load_int4_matmul()
        if (kernel is not None and kernel.applies(x) and self.packed.device.type == "cpu"
                and (bias is None or bias.dtype == torch.float32)):
            return kernel
        return None

    def apply_to(self, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        """x (T, in) -> quantize_activations(x) @ dequantized (in, out) [+ bias (out,)], in x's
        dtype. Natively for float32 CPU rows (:meth:`Int4Matmul.applies`: any count), else by
        torch with a transient dequantized copy of the weight."""
        kernel = self.native_kernel(x, bias)
        if kernel is not None:
            return kernel(x, self.packed, self.ws, self.out_features, bias)
        xq = quantize_activations(x).to(x.dtype)
        y = torch.mm(xq, self.dequantized(x.dtype).t())
        return y if bias is None else y + bias.to(x.dtype)
