"""Tensor storage of the paged KV cache: K and V of shape (L, num_blocks, block_size, Hkv, D).

The block manager decides which block holds what; this class only owns the memory, sizes it from
a byte budget, and copies blocks for copy-on-write. Its memory is allocated once, at construction,
and never grows: the budget is never exceeded. With ``dtype`` int8, K and V are stored as int8
with float32 ``scales`` (K's, V's), each of shape (L, num_blocks, Hkv): one per layer, block
and kv head (:mod:`metagen.engine.kv_quant`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.engine.kv_layout import block_bytes
from metagen.engine.kv_quant import read_dequantized, write_quantized
from metagen.engine.native.threads import torch_inline


def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                    dtype: torch.dtype) -> int:
    """Bytes of K plus V for one block across all layers (an int8 block's scales included)."""
    elem = torch.empty((), dtype=dtype).element_size()
    return block_bytes(num_layers, block_size, num_kv_heads, head_dim, elem,
                       scaled=dtype == torch.int8)


class KVCache:
    """K/V tensors of shape (num_layers, num_blocks, block_size, num_kv_heads, head_dim), and
    for an int8 cache their scales (num_layers, num_blocks, num_kv_heads)."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.scales: tuple[torch.Tensor, torch.Tensor] | None = None
        if dtype == torch.int8:
            scale_shape = (num_layers, num_blocks, num_kv_heads)
            self.scales = (torch.zeros(scale_shape, device=device),
                           torch.zeros(scale_shape, device=device))
        self.num_blocks = num_blocks
        self.block_size = block_size

    @property
    def nbytes(self) -> int:
        """Bytes allocated for K, V and (int8) their scales."""
        scales = 0 if self.scales is None else sum(s.nelement() * s.element_size()
                                                     for s in self.scales)
        return self.k.nelement() * self.k.element_size() * 2 + scales

    def move_entry(self, src: int, dst: int) -> None:
        """Copy the K/V of cache slot ``src`` (block * block_size + offset) to slot ``dst`` in
        every layer: an accepted draft-tree leaf, stored past its branch, to its position. The
        entries of ``dst``'s block before it stay; those after it are past the row's tokens. An
        int8 entry is dequantized and written as a new one (``write_quantized``: the block's
        scale grows where it must, its earlier entries requantized)."""
        hkv, d = self.k.shape[-2], self.k.shape[-1]
        if self.scales is None:
            for t in (self.k, self.v):
                flat = t.view(t.shape[0], -1, hkv, d)
                flat[:, dst].copy_(flat[:, src])
            return
        s = torch.tensor([src], dtype=torch.long, device=self.k.device)
        ds = torch.tensor([dst], dtype=torch.long, device=self.k.device)
        for t, scales in zip((self.k, self.v), self.scales):
            for layer in range(t.shape[0]):
                x = read_dequantized(t[layer], scales[layer], s, None, torch.float32)
                write_quantized(t[layer], scales[layer], ds, x)

    def copy_blocks(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy the contents of blocks ``src[i]`` into ``dst[i]`` in every layer (copy-on-write),
        with their scales. No block of ``dst`` may be among ``src`` (copy-on-write copies into
        fresh blocks): the copies are made one after another."""
        if not src:
            return
        tensors = (self.k, self.v) + (self.scales or ())
        if self.k.device.type == "cpu":
            # block by block, in place: a beam search step copies a block or two, and a gather
            # into a temporary and a scatter out of it cost 3.4x these copies (2 blocks of the
            # benchmark target: 98 against 28 us)
            with torch_inline():  # a few blocks: an OpenMP region would cost more than the copy
                for a, b in zip(src, dst):
                    for t in tensors:
                        t[:, b].copy_(t[:, a])
            return
        s = torch.tensor(list(src), dtype=torch.long, device=self.k.device)
        d = torch.tensor(list(dst), dtype=torch.long, device=self.k.device)
        for t in tensors:  # one gather and one scatter per tensor: two launches on a GPU
            t.index_copy_(1, d, t.index_select(1, s))
