"""Paged attention over the block KV cache, and the Hydragen shared-prefix merge.

Every step the runner builds one :class:`AttentionMetadata` for the whole batch (the same for all
layers). New keys/values are written into their cache slots through a flat slot index; each row's
context is then gathered with one ``index_select`` per layer into a padded ``(B, C)`` layout and
attended with PyTorch's fused SDPA, or, when Hydragen needs the log-sum-exp, an explicit softmax.

Hydragen (Juravsky et al. 2024, "Hydragen: High-Throughput LLM Inference with Shared Prefixes"):
when rows share a prefix of cache blocks (``n`` samples forked from one prompt, beams, tree-search
siblings), the queries of the whole group attend to the prefix **once** (one gather of the
prefix's KV per group and layer, never per row) and each row attends to its own suffix; the two
partial attentions are combined exactly by :func:`merge_attention` using their log-sum-exps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from metagen.engine.kv_quant import read_dequantized, write_quantized
from metagen.engine.native.threads import torch_inline

# Reads K and V at cache slots (n,), consecutive from the int when it is set -> two (n, Hkv, D).
KVReader = Callable[[torch.Tensor, int | None], tuple[torch.Tensor, torch.Tensor]]


@dataclass(slots=True)
class PrefixGroup:
    """Rows whose contexts start with the same ``prefix_slots`` (cache slots, shape (P,)).
    ``prefix_start``: set when those slots are consecutive (``prefix_start .. + P - 1``, a prompt
    prefilled into consecutive blocks): the prefix's K/V are then a view of the cache."""

    rows: torch.Tensor  # (R,) int64 row indices into the chunk's padded rows
    prefix_slots: torch.Tensor  # (P,) int64
    prefix_start: int | None = None


@dataclass(slots=True)
class RowChunk:
    """Rows of the batch attended together in one padded layout.

    ``q_index`` (b, M): flat token index of each padded query (padding points at token 0).
    ``kv_slots`` (b, C): cache slots each row attends to (its suffix only, when the row is in a
    prefix group); padding points at slot 0. ``mask`` (b, M, C): True where query m of row r may
    attend to key c; None when every query sees every slot (one row decoding one token).
    ``groups``: Hydragen prefix groups among these rows. ``kv_start``: set when
    the chunk is one row whose C slots are consecutive (``kv_start .. kv_start + C - 1``): its K/V
    are then a view of the cache, not a gather (batch-1 decoding on consecutive blocks).
    """

    q_index: torch.Tensor
    kv_slots: torch.Tensor
    mask: torch.Tensor | None
    groups: list[PrefixGroup] = field(default_factory=list)
    kv_start: int | None = None


@dataclass(slots=True)
class AttentionMetadata:
    """Index tensors of one step, shared by every layer.

    ``slot_mapping`` (T,): cache slot of each new token. ``chunks``: the rows, split so that
    decode rows are not padded to a prefill's length and each chunk's transient tensors stay
    bounded. ``out_index`` (T,): position of each flat token in the concatenation of the chunks'
    flattened (b * M) outputs, followed by the native output. ``native``: when set, the rows
    outside the chunks attend natively (``native(q, k_cache, v_cache, kv_scales)`` for one
    layer, the new K/V already written -> their tokens' (n, Hq, D);
    :meth:`~metagen.engine.native.decode_step.DecodeStep.attention`).
    """

    slot_mapping: torch.Tensor
    chunks: list[RowChunk]
    out_index: torch.Tensor
    native: Callable[[torch.Tensor, torch.Tensor, torch.Tensor,
                      tuple[torch.Tensor, torch.Tensor] | None], torch.Tensor] | None = None


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
           scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention with log-sum-exp.

    q (B, M, Hq, D), k/v (B, C, Hkv, D), mask (B, M, C) bool or None (all visible).
    Returns out (B, M, Hq, D) in q's dtype and lse (B, M, Hq) float32. A query whose mask row is
    all False gets lse = -inf and NaN output (callers never leave a real query without keys).
    """
    b, m, hq, d = q.shape
    c, hkv = k.shape[1], k.shape[2]
    g = hq // hkv
    qh = q.reshape(b, m, hkv, g, d).permute(0, 2, 3, 1, 4).reshape(b, hkv, g * m, d)
    scores = torch.matmul(qh, k.permute(0, 2, 3, 1)).float() * scale  # (B, Hkv, G*M, C)
    scores = scores.view(b, hkv, g, m, c)
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)  # (B, Hkv, G, M)
    probs = torch.exp(scores - lse[..., None]).to(v.dtype).view(b, hkv, g * m, c)
    out = torch.matmul(probs, v.permute(0, 2, 1, 3))  # (B, Hkv, G*M, D)
    out = out.view(b, hkv, g, m, d).permute(0, 3, 1, 2, 4).reshape(b, m, hq, d)
    return out, lse.permute(0, 3, 1, 2).reshape(b, m, hq)


def merge_attention(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor,
                    lse_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact softmax attention over the union of two disjoint key sets from the two partials.

    out_* (..., H, D), lse_* (..., H). softmax over A∪B = w_a * out_a + w_b * out_b with
    w_x = exp(lse_x - logaddexp(lse_a, lse_b)) (Hydragen, eq. 3; also FlashAttention's rescaling).
    """
    lse = torch.logaddexp(lse_a, lse_b)
    w_a = torch.exp(lse_a - lse).to(out_a.dtype)[..., None]
    w_b = torch.exp(lse_b - lse).to(out_b.dtype)[..., None]
    return out_a * w_a + out_b * w_b, lse


def paged_attention(q: torch.Tensor, k_new: torch.Tensor, v_new: torch.Tensor,
                    k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                    scale: float, kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None
                    ) -> torch.Tensor:
    """Write the new K/V into the cache, attend every new query over its row's context.

    q (T, Hq, D), k_new/v_new (T, Hkv, D), k_cache/v_cache (num_blocks, block_size, Hkv, D)
    (mutated: the new tokens' slots are written). ``kv_scales``: for an int8 cache, the K and V
    scales (num_blocks, Hkv) (mutated with the writes, :func:`~metagen.engine.kv_quant.
    write_quantized`); each chunk and Hydragen prefix then dequantizes exactly the entries it
    gathers, never the whole cache; native attention dequantizes in its kernel. Returns
    (T, Hq, D).
    """
    hkv, d = k_cache.shape[-2], k_cache.shape[-1]
    read: KVReader
    if kv_scales is None:
        kc = k_cache.view(-1, hkv, d)  # (S, Hkv, D) with S = num_blocks * block_size
        vc = v_cache.view(-1, hkv, d)
        kc.index_copy_(0, meta.slot_mapping, k_new)
        vc.index_copy_(0, meta.slot_mapping, v_new)
        read = functools.partial(_kv_at, kc, vc)
    else:
        with torch_inline():  # the step's new tokens and their blocks: too small for OpenMP
            for cache, scales, new in ((k_cache, kv_scales[0], k_new),
                                       (v_cache, kv_scales[1], v_new)):
                write_quantized(cache, scales, meta.slot_mapping, new)
        read = functools.partial(_kv_dequantized, k_cache, v_cache, kv_scales, q.dtype)
    outs = [_attend_chunk(q, read, chunk, scale) for chunk in meta.chunks]
    if meta.native is not None:
        outs.append(meta.native(q, k_cache, v_cache, kv_scales))
    out = outs[0] if len(outs) == 1 else torch.cat(outs)  # (sum b*M, Hq, D)
    return out.index_select(0, meta.out_index)


def _kv_at(kc: torch.Tensor, vc: torch.Tensor, slots: torch.Tensor, start: int | None
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of the cache ``kc``/``vc`` (S, Hkv, D) at ``slots`` (n,) -> two (n, Hkv, D):
    views of the cache when the slots are consecutive from ``start``, else gathered copies."""
    if start is not None:
        n = slots.shape[0]
        return kc.narrow(0, start, n), vc.narrow(0, start, n)
    return kc.index_select(0, slots), vc.index_select(0, slots)


def _kv_dequantized(k_cache: torch.Tensor, v_cache: torch.Tensor,
                    kv_scales: tuple[torch.Tensor, torch.Tensor], dtype: torch.dtype,
                    slots: torch.Tensor, start: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_kv_at` of an int8 cache (num_blocks, block_size, Hkv, D): the entries at
    ``slots``, dequantized to ``dtype``."""
    return (read_dequantized(k_cache, kv_scales[0], slots, start, dtype),
            read_dequantized(v_cache, kv_scales[1], slots, start, dtype))


def _attend_chunk(q: torch.Tensor, read: KVReader, chunk: RowChunk, scale: float
                  ) -> torch.Tensor:
    """Attention of one row chunk over the K/V that ``read`` returns; returns (b * M, Hq, D)."""
    d = q.shape[-1]
    b, m = chunk.q_index.shape
    c = chunk.kv_slots.shape[1]
    hq = q.shape[1]
    qp = q.index_select(0, chunk.q_index.view(-1)).view(b, m, hq, d)  # (b, M, Hq, D)
    kp, vp = read(chunk.kv_slots.view(-1), chunk.kv_start)  # kv_start: b == 1
    hkv = kp.shape[1]
    kp, vp = kp.view(b, c, hkv, d), vp.view(b, c, hkv, d)  # (b, C, Hkv, D)
    if not chunk.groups:  # no log-sum-exp needed: one fused kernel
        mask = None if chunk.mask is None else chunk.mask[:, None]
        out = F.scaled_dot_product_attention(
            qp.transpose(1, 2), kp.transpose(1, 2), vp.transpose(1, 2),
            attn_mask=mask, scale=scale, enable_gqa=True).transpose(1, 2)
        return out.reshape(b * m, hq, d)
    out, lse = attend(qp, kp, vp, chunk.mask, scale)
    for group in chunk.groups:
        r = group.rows.shape[0]
        kg, vg = read(group.prefix_slots, group.prefix_start)  # once per group
        kg, vg = kg[None], vg[None]  # (1, P, Hkv, D)
        qg = qp.index_select(0, group.rows).reshape(1, r * m, hq, d)
        out_p, lse_p = attend(qg, kg, vg, None, scale)
        merged, _ = merge_attention(out_p.view(r, m, hq, d), lse_p.view(r, m, hq),
                                    out.index_select(0, group.rows),
                                    lse.index_select(0, group.rows))
        out = out.index_copy(0, group.rows, merged)
    return out.reshape(b * m, hq, d)
