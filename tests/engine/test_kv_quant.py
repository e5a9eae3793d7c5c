"""The int8 KV cache's arithmetic: round-trip and requantization bounds, and what a write touches.

Bounds (``s`` the scale an entry is stored with; float32 arithmetic adds at most ``EPS * s``):
quantize then dequantize is within ``s / 2``; an entry requantized through scales
``s0 <= s1 <= ... <= sk`` is within ``(s0 + ... + sk) / 2`` of its value (one half step per
rounding).
"""

from __future__ import annotations

import torch

from metagen.engine.kv_quant import (absmax_scale, dequantize, quantize, read_dequantized,
                                     requantize, write_quantized)

EPS = 1e-5  # float32 slack, relative to the scale


def _values(shape, seed, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * torch.exp(torch.randn(shape[:-1], generator=g)
                                                        * spread)[..., None]


def test_round_trip_within_half_a_step():
    x = _values((64, 4, 16), seed=0)
    s = absmax_scale(x.abs().amax(-1))
    q = quantize(x, s)
    assert q.dtype == torch.int8 and int(q.abs().max()) <= 127
    err = (x - dequantize(q, s, torch.float32)).abs()
    assert bool((err <= s[..., None] * (0.5 + EPS)).all())
    assert bool((q.abs().amax(-1) == 127).all())  # the absmax entry uses the full range


def test_zero_scale_stores_zeros():
    q = quantize(torch.zeros(3, 2, 8), torch.zeros(3, 2))
    assert bool((q == 0).all())
    assert bool((dequantize(q, torch.zeros(3, 2), torch.float32) == 0).all())


def test_requantization_adds_one_half_step_per_rounding():
    x = _values((64, 4, 16), seed=1)
    s = absmax_scale(x.abs().amax(-1))
    q = quantize(x, s)
    total = s.clone()
    g = torch.Generator().manual_seed(2)
    for _ in range(6):  # a block whose scale grows six times
        new = s * (1 + torch.rand(s.shape, generator=g) * 3)
        new = torch.where(torch.rand(s.shape, generator=g) < 0.3, s, new)  # some heads unchanged
        q, s = requantize(q, s, new), new
        total += s
        err = (x - dequantize(q, s, torch.float32)).abs()
        assert bool((err <= total[..., None] * (0.5 + EPS)).all())
    first = quantize(x, absmax_scale(x.abs().amax(-1)))
    same = absmax_scale(x.abs().amax(-1))
    assert torch.equal(requantize(first, same, same), first)  # an unchanged scale: bitwise


def test_one_requantization_bound_is_tight_enough_to_matter():
    # |x - s1 q1| <= s1/2 + s0/2, and the s0/2 is reached: the bound is not loose by a step
    x = torch.tensor([[[1.49, 127.0]]])  # one head: 1.49 -> 1 (s0 = 1) -> 0 (s1 = 2)
    s0 = absmax_scale(x.abs().amax(-1))  # 1.0
    q1 = requantize(quantize(x, s0), s0, torch.tensor([[2.0]]))
    err = (x - dequantize(q1, torch.tensor([[2.0]]), torch.float32)).abs().max()
    assert 1.0 < float(err) <= 1.5


def _cache(num_blocks=6, bs=4, hkv=2, d=8):
    return (torch.zeros(num_blocks, bs, hkv, d, dtype=torch.int8),
            torch.zeros(num_blocks, hkv))


def test_incremental_writes_keep_every_entry_within_its_bound():
    cache, scales = _cache()
    x = _values((12, 2, 8), seed=3, spread=1.0)  # 12 tokens into blocks 2, 5, 1 (bs = 4)
    slots = torch.tensor([8, 9, 10, 11, 20, 21, 22, 23, 4, 5, 6, 7])
    bound = torch.zeros(6, 2)
    steps = ((0, 1), (1, 3), (3, 4), (4, 6), (6, 9), (9, 12))  # ragged steps, like decode
    for (lo, hi), grow in zip(steps, (1, 1, 4, 1, 1, 3)):
        x[lo:hi] *= grow  # later tokens larger: the blocks' scales grow
        write_quantized(cache, scales, slots[lo:hi], x[lo:hi])
        blocks = torch.unique(slots[lo:hi] // 4)
        bound[blocks] += scales[blocks]
        got = read_dequantized(cache, scales, slots[:hi], None, torch.float32)
        lim = bound[slots[:hi] // 4][..., None] * (0.5 + EPS)
        assert bool(((got - x[:hi]).abs() <= lim).all())
    for b in (2, 5, 1):  # each block's final scale is its entries' absmax / 127
        held = x[(slots // 4) == b]
        assert torch.allclose(scales[b], held.abs().amax((0, 2)) / 127)


def test_one_write_growing_two_blocks_requantizes_each_with_its_own_scales():
    # x1 then x5: every entry requantized at most once, within (s0 + s1) / 2 <= s1
    cache, scales = _cache()
    y = _values((8, 2, 8), seed=7, spread=1.0)
    pair = torch.tensor([0, 1, 8, 9])
    write_quantized(cache, scales, pair, y[:4])
    y[4:] *= 5
    write_quantized(cache, scales, torch.tensor([2, 10, 3, 11]), y[4:])
    all_slots = torch.tensor([0, 1, 8, 9, 2, 10, 3, 11])
    back = read_dequantized(cache, scales, all_slots, None, torch.float32)
    assert bool(((back - y).abs() <= scales[all_slots // 4][..., None] * (1.0 + EPS)).all())


def test_write_from_a_blocks_first_slot_resets_its_scale_and_touches_only_written_blocks():
    cache, scales = _cache()
    write_quantized(cache, scales, torch.arange(24), _values((24, 2, 8), seed=4) * 100)
    before_k, before_s = cache.clone(), scales.clone()
    small = _values((2, 2, 8), seed=5, spread=0.0) * 0.01
    write_quantized(cache, scales, torch.tensor([12, 13]), small)  # block 3 reused from slot 0
    assert torch.allclose(scales[3], small.abs().amax((0, 2)) / 127)  # not the stale scale
    back = read_dequantized(cache, scales, torch.tensor([12, 13]), None, torch.float32)
    assert bool(((back - small).abs() <= scales[3][None, :, None] * (0.5 + EPS)).all())
    others = torch.tensor([0, 1, 2, 4, 5])
    assert torch.equal(cache[others], before_k[others])
    assert torch.equal(scales[others], before_s[others])
    assert torch.equal(cache[3, 2:], before_k[3, 2:])  # unwritten slots of the block untouched


def test_read_view_equals_read_gather():
    cache, scales = _cache()
    write_quantized(cache, scales, torch.arange(24), _values((24, 2, 8), seed=6))
    slots = torch.arange(5, 17)
    assert torch.equal(read_dequantized(cache, scales, slots, 5, torch.float32),
                       read_dequantized(cache, scales, slots, None, torch.float32))
    bf = read_dequantized(cache, scales, slots, None, torch.bfloat16)
    assert bf.dtype == torch.bfloat16
