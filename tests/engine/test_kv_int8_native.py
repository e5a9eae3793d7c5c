"""Native attention over the int8 KV cache (``mg_attention_q8``) equals dequantize-then-attend.

Kernel: random int8 caches and scales over several blocks, grouped-query heads (8 query heads on
2 kv heads), a Hydragen prefix group and a row of several new tokens, on every vector path this
CPU runs, against float64 attention over :func:`~metagen.engine.kv_quant.read_dequantized`'s
values. The kernel dequantizes with the same float32 rounding and attends in float32, so the two
differ by float32 summation rounding only: the bound asserted is 1e-5 on outputs of magnitude
<= the values' (|v| <= 127 * 0.02 = 2.54).

Engine: on stories260K with an int8 cache, decoding through the whole native step (its int8
write in C) or through native attention alone (the step off: PyTorch products and write) gives
the tokens of the same engine with native kernels off, and log-probabilities that agree as two
int8-cache paths can (float32 rounding on most positions; a value on a rounding boundary is
stored one step apart and moves the positions after it: tests/engine/_int8_runs.py); so do
prefix-cache hits and a fork (copy-on-write of a partial block with its scales) through the
native step, whose results are the same bit for bit at 1 and 3 threads.
"""

from __future__ import annotations

import pytest
import torch

from metagen.engine.kv_quant import read_dequantized
from metagen.engine.models.loader import load_model
from metagen.engine.native.build import NativeBuildError, compiler
from metagen.engine.native.decode_step import DecodeStep, StepPlan
from metagen.engine.native.library import open_library
from metagen.types import SamplingParams

from ._int8_runs import assert_int8_runs_agree
from ._native_variants import variants
from .test_kv_int8 import GREEDY30

BLOCK, NUM_BLOCKS = 4, 24
OUT_TOL = 1e-5


@pytest.fixture(scope="module", params=variants(), ids=[name for name, _ in variants()])
def step(request, random_model_dir):
    """The native step on a random llama (8 query heads, 2 kv heads, head_dim 8), built with
    this variant's flags."""
    name, flags = request.param
    if compiler() is None:
        pytest.skip("no C compiler")
    try:
        lib = open_library(flags)
    except NativeBuildError as e:
        pytest.skip(f"this machine cannot build the {name} path: {e}")
    assert name != "avx2" or lib.mg_isa() == 256
    return DecodeStep(lib, load_model(random_model_dir("llama")))


def _reference(q, kc, vc, ks, vs, plan: StepPlan, scale: float) -> torch.Tensor:
    """Each token's float64 attention over its row's positions 0 .. its own, dequantized."""
    hq, hkv = q.shape[1], kc.shape[2]
    out = torch.empty(q.shape, dtype=torch.float64)
    for r in range(plan.start.shape[0]):
        for t in range(int(plan.tok_off[r]), int(plan.tok_off[r + 1])):
            pos = torch.arange(int(plan.start[r]) + t - int(plan.tok_off[r]) + 1)
            slots = plan.tables[r, pos // BLOCK] * BLOCK + pos % BLOCK
            k = read_dequantized(kc, ks, slots, None, torch.float32).double()  # (n, Hkv, D)
            v = read_dequantized(vc, vs, slots, None, torch.float32).double()
            k, v = (x.repeat_interleave(hq // hkv, dim=1) for x in (k, v))  # (n, Hq, D)
            p = torch.softmax(torch.einsum("hd,nhd->hn", q[t].double(), k) * scale, dim=-1)
            out[t] = torch.einsum("hn,nhd->hd", p, v)
    return out


def _random_cache(hkv: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    kc, vc = (torch.randint(-127, 128, (NUM_BLOCKS, BLOCK, hkv, d), generator=g,
                            dtype=torch.int8) for _ in range(2))
    ks, vs = (torch.rand(NUM_BLOCKS, hkv, generator=g) * 0.02 for _ in range(2))
    return kc, vc, ks, vs


@pytest.mark.parametrize("threads", [1, 3])
def test_int8_native_attention_equals_dequantize_then_attend(step, threads):
    model = step._keep
    cfg = model.cfg
    kc, vc, ks, vs = _random_cache(cfg.num_kv_heads, cfg.head_dim, seed=threads)
    # rows 0 and 1 share their first 3 blocks (a Hydragen group); row 1 verifies 3 tokens; row 2
    # is alone; rows 0 and 2 end inside a block
    tables = [[3, 7, 1, 9, 12], [3, 7, 1, 20, 15], [5, 2, 8, 11, 0, 4]]
    plan = StepPlan.build(BLOCK, tables, [17, 14, 21], [1, 3, 2], [([0, 1], 3)])
    t = int(plan.tok_off[-1])
    q = torch.randn(t, cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim,
                    generator=torch.Generator().manual_seed(5))[:, :cfg.num_heads]
    got = step.attention(q, kc, vc, plan, threads=threads, scales=(ks, vs))
    ref = _reference(q, kc, vc, ks, vs, plan, cfg.head_dim ** -0.5)
    assert float((got.double() - ref).abs().max()) < OUT_TOL
    # and the result is the same bit for bit on any number of threads
    assert torch.equal(got, step.attention(q, kc, vc, plan, threads=1, scales=(ks, vs)))


@pytest.mark.parametrize("threads", [1, 3])
def test_float_cache_attention_equals_int8_cache_attention_bit_for_bit(step, threads):
    """A float32 cache is read position by position (every kv head of a position in turn), an
    int8 one block by block and head by head after dequantizing; both do the same arithmetic in
    the same order for each query, so a float32 cache holding exactly the values the int8 path
    dequantizes ((float)q * scale) gives the same bits."""
    model = step._keep
    cfg = model.cfg
    kc, vc, ks, vs = _random_cache(cfg.num_kv_heads, cfg.head_dim, seed=10 + threads)
    kf, vf = (c.float() * s[:, None, :, None] for c, s in ((kc, ks), (vc, vs)))
    tables = [[3, 7, 1, 9, 12, 6, 10, 13, 14, 16, 17], [3, 7, 1, 20, 15], [5, 2, 8, 11, 0, 4]]
    plan = StepPlan.build(BLOCK, tables, [40, 14, 21], [1, 3, 2], [([0, 1], 3)])
    t = int(plan.tok_off[-1])
    q = torch.randn(t, cfg.num_heads, cfg.head_dim, generator=torch.Generator().manual_seed(7))
    got = step.attention(q, kf.contiguous(), vf.contiguous(), plan, threads=threads)
    assert torch.equal(got, step.attention(q, kc, vc, plan, threads=threads, scales=(ks, vs)))


@pytest.mark.parametrize("path", ["step", "attention"])
@pytest.mark.parametrize("n", [1, 3])
def test_int8_engine_with_native_kernels_equals_native_off(stories_engine_factory, n, path):
    params = SamplingParams(temperature=0.0 if n == 1 else 1.0, n=n, seed=77, max_tokens=48,
                            ignore_eos=True)
    native = stories_engine_factory(kv_cache_dtype="int8", block_size=8)
    if native.runner.native is None:
        pytest.skip("no native library on this machine (no C compiler or vector ISA)")
    if path == "attention":
        native.runner.native.max_tokens = 0  # the whole step off: native attention only
    off = stories_engine_factory(kv_cache_dtype="int8", block_size=8)
    off.runner.native = None
    prompt = native.tokenizer("Once upon a time, in a big forest,")["input_ids"]
    a, b = (e.generate([prompt], params)[0] for e in (native, off))
    ran = native.runner.native_steps if path == "step" else native.runner.native_attention_steps
    assert ran >= 47 and off.runner.native_steps == off.runner.native_attention_steps == 0
    assert_int8_runs_agree([(a, b)])  # was max < 1e-4: 1.2e-3 on an AVX2-only EPYC


def _int8_engine(factory, native: bool, threads: int | None = None):
    e = factory(kv_cache_dtype="int8", block_size=8)
    if e.runner.native is None:
        pytest.skip("no native library on this machine (no C compiler or vector ISA)")
    if not native:
        e.runner.native = None
    else:
        e.runner.native.threads = threads
    return e


STORY = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the "
         "park with her friends. One day, she saw a big red ball under a tree and ran to get it.")


def _prefix_hit_and_fork(engine):
    """Greedy runs that hit the prefix cache (a story's first 40 tokens: 5 whole blocks), then a
    request forked into 3 after 7 steps (the children copy the partial block with its scales).
    A story, as the model's flat next-token distributions on random tokens turn the paths'
    float32 rounding differences (which can move an int8 value by one step) into near-tie
    flips."""
    base = engine.tokenizer(STORY)["input_ids"][:40]
    prompts = [base + tail for tail in ([5, 6], [7], [8, 9, 10])]
    outs = engine.generate(prompts[:1], GREEDY30) + engine.generate(prompts[1:], GREEDY30)
    rid = engine.add_request(base + [11], GREEDY30)
    for _ in range(7):
        engine.step()
    engine.fork(engine.requests[rid].seqs[0].seq_id, 2)
    outs.append(engine.run_until_done([rid])[0])
    engine.check_integrity()
    return outs


def test_int8_step_on_prefix_hits_and_forks_equals_native_off(stories_engine_factory):
    native, off = (_int8_engine(stories_engine_factory, on) for on in (True, False))
    a, b = _prefix_hit_and_fork(native), _prefix_hit_and_fork(off)
    assert [r.num_cached_tokens for r in a] == [0, 40, 40, 40]
    assert native.runner.native_steps > 0 and off.runner.native_steps == 0
    assert len(a[-1].outputs) == 3
    assert_int8_runs_agree(zip(a, b))  # was max < 1e-4 per request: 3.5e-4 on AVX2


def test_int8_step_is_the_same_at_any_thread_count(stories_engine_factory):
    one, three = (_prefix_hit_and_fork(_int8_engine(stories_engine_factory, True, threads))
                  for threads in (1, 3))
    for x, y in zip(one, three):
        assert [(c.token_ids, c.logprobs) for c in x.outputs] == [
            (c.token_ids, c.logprobs) for c in y.outputs]
