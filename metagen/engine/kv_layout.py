"""Bytes of one KV cache block, for each storage layout (no torch: the config sizes with it).

A float cache stores K and V as ``elem_bytes``-wide values; an int8 cache stores one byte per
value plus one float32 scale per (layer, block, kv head) for K and one for V
(:mod:`metagen.engine.kv_quant`).
"""

from __future__ import annotations

SCALE_BYTES = 4  # one float32 scale per (layer, block, kv head), for K and for V


def block_bytes(num_layers: int, block_size: int, num_kv_heads: int, head_dim: int,
                elem_bytes: int, scaled: bool) -> int:
    """Bytes of K plus V for one block across all layers: ``elem_bytes`` per value, plus the
    block's per-head scales when ``scaled`` (the int8 layout, ``elem_bytes`` = 1)."""
    values = 2 * num_layers * block_size * num_kv_heads * head_dim * elem_bytes
    return values + (2 * num_layers * num_kv_heads * SCALE_BYTES if scaled else 0)
