"""The int8 KV cache's arithmetic: symmetric absmax quantization, one scale per block and head.

A block of one layer stores its K (and, separately, its V) as int8 values ``q`` of shape
(block_size, Hkv, D) and one float32 scale ``s`` per kv head; the value an entry stands for is
``s * q``. A block's scale is ``absmax / 127`` of what it holds, so nothing clips.

Bounds (``x`` a value, ``s`` the scale it was stored with, ``|x| <= 127 s``):

- quantize: ``|x - s * round(x / s)| <= s / 2``.
- requantize from ``s0`` to ``s1 >= s0``: ``q1 = round(q0 * s0 / s1)``; the stored value moves
  by at most ``s1 / 2``, so ``|x - s1 q1| <= s1 / 2 + s0 / 2``. An entry requantized through
  ``s0 <= s1 <= ... <= sk`` is within ``(s0 + s1 + ... + sk) / 2`` of ``x``.

Writing (:func:`write_quantized`): the runner writes each row's new tokens at consecutive
positions into blocks that row owns alone (a shared block is copied first, scales included), so a
block's entries before the first slot written in a step are its only valid ones, and a block
written from its first slot holds nothing valid yet. Such a block takes the scale of the new
tokens alone; any other block keeps its scale unless the new tokens need a larger one, and then
its entries are requantized to it. Only the written blocks are touched. A block's scale never
shrinks while it is appended to, so after a rollback (speculative decoding) the rejected
tokens' magnitude may still be in it: the entries stay within the bounds above, but are not
bitwise what a run without the rollback would store. The native decode step writes with the same
float32 arithmetic in C (``write_q8`` in ``native/decode_step.c``): given the same K/V, the same
int8 values and scales bit for bit.
"""

from __future__ import annotations

import torch

QMAX = 127  # symmetric range [-127, 127]: -128 is never used


def absmax_scale(amax: torch.Tensor) -> torch.Tensor:
    """The scale that stores values of largest magnitude ``amax`` without clipping."""
    return amax / QMAX


def quantize(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x (..., D) float, scale (...) -> int8 (..., D): ``round(x / scale)`` (a zero scale stores
    zeros). ``|x - scale * q| <= scale / 2`` wherever ``|x| <= 127 * scale``."""
    s = torch.where(scale > 0, scale, torch.ones_like(scale))[..., None]
    return torch.round(x.float() / s).clamp_(-QMAX, QMAX).to(torch.int8)


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """q (..., D) int8, scale (...) -> ``scale * q`` (..., D) in ``dtype`` (computed in
    float32)."""
    return (q.float() * scale[..., None]).to(dtype)


def requantize(q: torch.Tensor, old: torch.Tensor, new: torch.Tensor) -> torch.Tensor:
    """q (..., D) int8 stored with ``old`` (...) -> the same values stored with ``new >= old``:
    ``round(q * old / new)``; unchanged where ``new == old``."""
    ratio = torch.where(new > old, old / torch.where(new > 0, new, torch.ones_like(new)),
                        torch.ones_like(new))
    return torch.round(q.float() * ratio[..., None]).clamp_(-QMAX, QMAX).to(torch.int8)


def write_quantized(cache: torch.Tensor, scales: torch.Tensor, slots: torch.Tensor,
                    x: torch.Tensor) -> None:
    """Store x (T, Hkv, D) at the flat ``slots`` (T,) of one layer's ``cache``
    (num_blocks, block_size, Hkv, D) int8 with ``scales`` (num_blocks, Hkv) float32, both
    mutated; see the module docstring for which scale each written block ends with."""
    nb, bs, hkv, d = cache.shape
    blocks = torch.div(slots, bs, rounding_mode="floor")
    ub, inv = torch.unique(blocks, return_inverse=True)  # (U,), (T,)
    u = ub.shape[0]
    xf = x.float()
    amax = torch.zeros(u, hkv, dtype=torch.float32, device=x.device).scatter_reduce_(
        0, inv[:, None].expand(-1, hkv), xf.abs().amax(-1), "amax")
    first = torch.full((u,), bs, dtype=slots.dtype, device=slots.device).scatter_reduce_(
        0, inv, slots - blocks * bs, "amin")  # first slot written in each block
    old = scales.index_select(0, ub)
    need = absmax_scale(amax)
    keeps = (first > 0)[:, None]  # the block holds valid entries before the written ones
    new = torch.where(keeps, torch.maximum(old, need), need)
    grown = (keeps & (new > old)).any(1).nonzero().squeeze(1)
    if grown.numel():
        b = ub.index_select(0, grown)
        cache.index_copy_(0, b, requantize(cache.index_select(0, b),  # (G, bs, Hkv, D)
                                           old.index_select(0, grown)[:, None],  # (G, 1, Hkv)
                                           new.index_select(0, grown)[:, None]))
    scales.index_copy_(0, ub, new)
    cache.view(nb * bs, hkv, d).index_copy_(0, slots, quantize(xf, new.index_select(0, inv)))


def read_dequantized(cache: torch.Tensor, scales: torch.Tensor, slots: torch.Tensor,
                     start: int | None, dtype: torch.dtype) -> torch.Tensor:
    """The values at ``slots`` (n,) of one layer's int8 ``cache`` (num_blocks, block_size, Hkv,
    D) with ``scales`` (num_blocks, Hkv) -> (n, Hkv, D) in ``dtype``. Only those n entries are
    dequantized; ``start`` set means the slots are ``start .. start + n - 1`` (read as a view)."""
    nb, bs, hkv, d = cache.shape
    flat = cache.view(nb * bs, hkv, d)
    q = flat.narrow(0, start, slots.shape[0]) if start is not None else flat.index_select(0, slots)
    s = scales.index_select(0, torch.div(slots, bs, rounding_mode="floor"))
    return dequantize(q, s, dtype)
