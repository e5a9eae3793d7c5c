"""Tensor storage of the paged KV cache: K and V of shape (L, num_blocks, block_size, Hkv, D).

The block manager decides which block holds what; this class only owns the memory, sizes it from
a byte budget, and copies blocks for copy-on-write. Its memory is allocated once, at construction,
and never grows: the budget is never exceeded.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from metagen.engine.native.threads import torch_inline


def bytes_per_block(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                    dtype: torch.dtype) -> int:
    """Bytes of K plus V for one block across all layers."""
    elem = torch.empty((), dtype=dtype).element_size()
    return 2 * num_layers * block_size * num_kv_heads * head_dim * elem


class KVCache:
    """K/V tensors of shape (num_layers, num_blocks, block_size, num_kv_heads, head_dim)."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int,
                 head_dim: int, dtype: torch.dtype, device: torch.device | str) -> None:
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks = num_blocks
        self.block_size = block_size

    @property
    def nbytes(self) -> int:
        return self.k.nelement() * self.k.element_size() * 2

    def copy_blocks(self, src: Sequence[int], dst: Sequence[int]) -> None:
        """Copy the contents of blocks ``src[i]`` into ``dst[i]`` in every layer (copy-on-write)."""
        if not src:
            return
        s = torch.tensor(list(src), dtype=torch.long, device=self.k.device)
        d = torch.tensor(list(dst), dtype=torch.long, device=self.k.device)
        with torch_inline():  # a few blocks: an OpenMP region would cost more than the copy
            self.k.index_copy_(1, d, self.k.index_select(1, s))
            self.v.index_copy_(1, d, self.v.index_select(1, s))
