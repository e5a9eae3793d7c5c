"""The native decode step on an int8 KV cache (``mg_decode_step_q8``).

Write: the step's first layer computes the new tokens' K/V from their embeddings alone, the same
bits whatever the cache holds, so the int8 cache it leaves in layer 0 must equal, bit for bit,
:func:`~metagen.engine.kv_quant.write_quantized` of those K/V (read back from a float32-cache
run of the same step) into the cache as it was: same int8 values, same scales. The plan covers
a block whose scale grows mid-block (its earlier entries requantized), one whose scale is kept,
a block written from its first slot (fresh scale), a row of three tokens across two blocks and a
Hydragen prefix group; on every vector path this CPU runs, at 1 and 3 threads (the same bits).

Step: against the PyTorch int8 path (same model, the runner's native kernels off) over
prefills, decode and verification steps on a random llama. Each step starts both paths from the
same quantized state (the PyTorch path's cache copied into the native one), so the step's K/V
differ by float32 rounding only (~1e-7 relative; layer 0's are the same bits), and:

- every int8 value it leaves is within one quantization step of the other path's: the two
  values before rounding (x / scale, |x / scale| <= 127) differ by far less than one step, and
  two reals less than 1 apart round to integers at most 1 apart (a requantized entry: the same
  old q times ratios of scales that differ by float32 rounding); the scales within 1e-5
  relative (each is a maximum |x| / 127 of values that differ by float32 rounding);
- where the step wrote the same int8 values on both paths (a value within float32 rounding of
  a rounding boundary is rare; at least half the steps), its logits agree within
  FLOAT_LOGIT_TOL: both attend over the same quantized state, so only float32 summation order
  differs (logits |z| <= ~10 from sums of <= 96 products: unit roundoff 2^-24 times the sum of
  the terms' magnitudes, ~1e-5 at most; measured 4.2e-6). Where a value was stored one step
  apart the step's logits move by that step's effect, which no float32 bound covers.
"""

from __future__ import annotations

import pytest
import torch

from metagen.engine.kv_cache import KVCache
from metagen.engine.kv_quant import write_quantized
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.native.decode_step import DecodeStep, StepPlan

from .test_kv_int8_native import step  # noqa: F401  (the native step on each vector path)

BLOCK, NUM_BLOCKS = 4, 24
TINY, HUGE = 1e-4, 100.0  # old scales that every new value outgrows / none reaches
FLOAT_LOGIT_TOL = 1e-4  # float32 rounding on the same quantized state (docstring)

def _int8_cache(cfg, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random int8 K/V (L, NUM_BLOCKS, BLOCK, Hkv, D) and scales (L, NUM_BLOCKS, Hkv) in
    [0.01, 0.03), blocks 12 and 4 with TINY scales, block 20 with HUGE ones."""
    g = torch.Generator().manual_seed(seed)
    shape = (cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim)
    kq, vq = (torch.randint(-127, 128, shape, generator=g, dtype=torch.int8) for _ in range(2))
    ks, vs = (0.01 + 0.02 * torch.rand(shape[:2] + shape[3:4], generator=g) for _ in range(2))
    for s in (ks, vs):
        s[:, [12, 4]] = TINY
        s[:, 20] = HUGE
    return kq, vq, ks, vs


@pytest.mark.parametrize("threads", [1, 3])
def test_int8_step_writes_what_write_quantized_writes(step, threads):
    cfg = step._keep.cfg
    hkv, d = cfg.num_kv_heads, cfg.head_dim
    # rows 0 and 1 share their first 3 blocks (a Hydragen group). Row 0 writes slot 1 of block 12
    # (TINY: grows, entry 0 requantized); row 1 slots 2-3 of block 20 (HUGE: kept) and slot 0 of
    # block 15 (fresh); row 2 slots 1-2 of block 4 (TINY: grows)
    tables = [[3, 7, 1, 9, 12], [3, 7, 1, 20, 15], [5, 2, 8, 11, 0, 4]]
    plan = StepPlan.build(BLOCK, tables, [17, 14, 21], [1, 3, 2], [([0, 1], 3)])
    t = int(plan.tok_off[-1])
    h = torch.randn(t, cfg.hidden_size, generator=torch.Generator().manual_seed(3))
    fk, fv = (torch.zeros(cfg.num_layers, NUM_BLOCKS, BLOCK, hkv, d) for _ in range(2))
    step(h.clone(), plan, fk, fv, threads=threads)
    _, slots = plan.positions_and_slots()
    kq, vq, ks, vs = _int8_cache(cfg, seed=threads)
    want = [x.clone() for x in (kq, vq, ks, vs)]
    for cache, scales, f in ((want[0], want[2], fk), (want[1], want[3], fv)):
        write_quantized(cache[0], scales[0], slots, f[0].view(-1, hkv, d)[slots])
    got = [x.clone() for x in (kq, vq, ks, vs)]
    out = h.clone()
    step(out, plan, got[0], got[1], threads=threads, scales=(got[2], got[3]))
    for a, b in zip(got, want):
        assert torch.equal(a[0], b[0])
    # the cases the plan meant to cover did happen
    assert (got[2][0, [12, 4]] > TINY).all() and (got[2][0, 20] == HUGE).all()
    assert not torch.equal(got[0][0, 12, 0], kq[0, 12, 0])  # requantized in place
    # every layer writes only the written blocks, and any thread count gives the same bits
    written = [12, 20, 15, 4]
    others = [b for b in range(NUM_BLOCKS) if b not in written]
    for a, b in zip(got, (kq, vq, ks, vs)):
        assert torch.equal(a[:, others], b[:, others])
    again = [x.clone() for x in (kq, vq, ks, vs)]
    out1 = h.clone()
    step(out1, plan, again[0], again[1], threads=1, scales=(again[2], again[3]))
    assert torch.equal(out1, out) and all(torch.equal(a, b) for a, b in zip(again, got))


def _runner(model, native: DecodeStep | None) -> ModelRunner:
    cfg = model.cfg
    runner = ModelRunner(model, KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads,
                                        cfg.head_dim, torch.int8, "cpu"), native=False)
    runner.native = native
    return runner


def test_int8_step_equals_the_pytorch_int8_path(step):
    model = step._keep
    native, ref = _runner(model, step), _runner(model, None)
    g = torch.Generator().manual_seed(11)
    rows = [(list(range(1, 7)), 6), (list(range(7, 13)), 9), (list(range(13, 19)), 3)]
    prompts = [ExtendRequest(table, 0, torch.randint(3, 96, (n,), generator=g).tolist())
               for table, n in rows]
    steps = [[r] for r in prompts]  # prefilled one row at a time (the native step on `native`)
    cached = [n for _, n in rows]
    for i in range(8):  # decode steps; every third one verifies 3 tokens on row 1
        lens = [1, 3 if i % 3 == 2 else 1, 1]
        steps.append([ExtendRequest(table, c, torch.randint(3, 96, (n,), generator=g).tolist(),
                                    all_logits=True)
                      for (table, _), c, n in zip(rows, cached, lens)])
        cached = [c + n for c, n in zip(cached, lens)]
    same_state = 0
    for reqs in steps:
        a, b = native.extend(reqs), ref.extend(reqs)
        if _within_one_step(native.kv, ref.kv):  # the same quantized state: float32 rounding
            same_state += 1
            for x, y in zip(a, b):
                assert float((x - y).abs().max()) < FLOAT_LOGIT_TOL
        _copy_cache(ref.kv, native.kv)
    assert native.native_steps == 11 and ref.native_steps == 0
    assert same_state >= len(steps) / 2


def _within_one_step(kv, ref) -> bool:
    """Asserts every int8 value of ``kv`` within one step of ``ref``'s and the scales within
    1e-5 relative (module docstring); returns whether the int8 values are the same (the scales
    then differ by float32 rounding at most, as the values they dequantize to do)."""
    assert kv.scales is not None and ref.scales is not None
    for x, y in ((kv.k, ref.k), (kv.v, ref.v)):
        assert int((x.int() - y.int()).abs().max()) <= 1
    for x, y in zip(kv.scales, ref.scales):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=0)
    return torch.equal(kv.k, ref.k) and torch.equal(kv.v, ref.v)


def _copy_cache(src, dst) -> None:
    for x, y in zip((src.k, src.v) + src.scales, (dst.k, dst.v) + dst.scales):
        y.copy_(x)
