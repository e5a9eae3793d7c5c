"""The native decode step (all layers of a few-token step in C), and native attention under
PyTorch products (wide decode steps), equal the PyTorch path.

Two runners share a model; each has its own KV cache. Both are driven through the same random
sequence of steps over hand-made block tables: prompts prefilled (always PyTorch), then steps
mixing single-token decode rows, multi-token rows (speculative verification) and rows forked
from one prompt (Hydragen prefix groups, with and without Hydragen). Every step's logits and the
whole KV cache must agree to float32 rounding.
"""

from __future__ import annotations

import random

import pytest
import torch

from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import NATIVE_ATTENTION_MAX_ROW, ExtendRequest, ModelRunner
from metagen.engine.models.loader import load_model
from metagen.engine.native.decode_step import DecodeStep, StepPlan, for_model
from metagen.engine.native.library import open_library
from tests.tolerances import FLOAT_LOGPROB_TOL

from ._native_variants import variants

BLOCK = 4
NUM_BLOCKS = 256


def _runners(folder, hydragen: bool, isa: str = "native", quantization: str | None = None
             ) -> tuple[ModelRunner, ModelRunner]:
    """A runner with the native step (this machine's build, or the AVX2 path built explicitly)
    and a PyTorch-only runner, on one model (its projections quantized as asked)."""
    model = load_model(folder, quantization=quantization)
    cfg = model.cfg

    def kv() -> KVCache:
        return KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim,
                       torch.float32, "cpu")

    native = ModelRunner(model, kv(), hydragen=hydragen)
    if native.native is None:
        pytest.skip("no native library on this machine (no C compiler or vector ISA)")
    if isa != "native":
        lib = open_library(dict(variants())[isa])
        assert (isa, lib.mg_isa()) == ("avx2", 256)
        native.native = DecodeStep(lib, model)
    return native, ModelRunner(model, kv(), hydragen=hydragen, native=False)


class _Seq:
    """A row: its block table (grown on demand from a shared pool) and its cached length."""

    def __init__(self, table: list[int], cached: int) -> None:
        self.table, self.cached = table, cached


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3", "qwen3hd12", "llama3rope"])
@pytest.mark.parametrize("hydragen", [True, False])
@pytest.mark.parametrize("path", ["step", "attention"])
@pytest.mark.parametrize("isa", [name for name, _ in variants()])
def test_native_steps_equal_pytorch_steps(random_model_dir, kind, hydragen, path, isa):
    """path "step": every step fits the native decode step. "attention": the decode step is
    limited to 0 tokens, so every step runs its products in PyTorch and the attention of its
    short rows natively (as a step wider than the decode step's limit does), mixed with some
    rows too long for that, which attend through PyTorch in the same step."""
    _check_native_equals_pytorch(*_runners(random_model_dir(kind), hydragen, isa), path,
                                 hydragen, f"{kind}{hydragen}{path}{isa}")


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("isa", [name for name, _ in variants()])
@pytest.mark.parametrize("quantization", ["int8", "w8a8"])
def test_int8_native_steps_equal_pytorch_steps(random_model_dir, kind, isa, quantization,
                                               monkeypatch):
    """int8 projections: the decode step's int8 products (this ISA's build) against the PyTorch
    path's dequantized torch products (the few-row int8 kernel turned off for it; with w8a8
    after the same activation quantization); llama has an untied (quantized) LM head, qwen2 a
    q|k|v bias."""
    monkeypatch.setattr("metagen.engine.models.int8.load_int8_matmul", lambda: None)
    folder = random_model_dir(kind)
    # w8a8: the weight-only int8 PyTorch runner measures what quantizing activations moves
    weights_only = _runners(folder, True, isa, "int8")[1] if quantization == "w8a8" else None
    _check_native_equals_pytorch(*_runners(folder, True, isa, quantization), "step", True,
                                 f"{quantization}{kind}{isa}", weights_only)


def _close(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None = None) -> None:
    """``x`` equals ``y`` to float32 rounding (FLOAT_LOGPROB_TOL, tests/tolerances.py). With
    ``w`` (activations quantized to int8 on both paths; ``w`` is the same value with float
    activations): a value the two paths compute a
    rounding apart can land on either side of a quantization step, and that step spreads through
    the later layers, so ``x`` may differ from ``y`` by at most half of what quantizing every
    activation moves (``|y - w|``), in the largest and in the mean difference. A machine's own
    float rounding decides where the flips fall; what they move is a few values by one step
    against every value by up to half a step (measured on a Xeon and a Zen 4: 0.03-0.06 at most
    and 0.009-0.012 on average, against 0.4-1.2 and 0.07-0.46 for the whole quantization)."""
    d = (x - y).abs()
    if w is None:
        assert d.max().item() < FLOAT_LOGPROB_TOL
        return
    q = (y - w).abs()
    assert d.max().item() <= max(FLOAT_LOGPROB_TOL, q.max().item() / 2), (d.max().item(),
                                                                           q.max().item())
    assert d.mean().item() <= max(1e-6, q.mean().item() / 2), (d.mean().item(), q.mean().item())


def _check_native_equals_pytorch(native: ModelRunner, ref: ModelRunner, path: str,
                                 hydragen: bool, seed: str,
                                 weights_only: ModelRunner | None = None) -> None:
    """Drive both runners (and ``weights_only``, w8a8's measure of its activation rounding: see
    :func:`_close`) through one random sequence of steps; compare every step and the caches."""
    budget_per_step = native.native.max_tokens
    if path == "attention":
        native.native.max_tokens = 0
        budget_per_step = 40
    rng = random.Random(seed)
    free = list(range(1, NUM_BLOCKS))
    rng.shuffle(free)  # blocks out of order: slots are not consecutive

    def step(reqs: list[ExtendRequest]) -> None:
        a, b = native.extend(reqs), ref.extend(reqs)
        c = weights_only.extend(reqs) if weights_only else [None] * len(b)
        for x, y, z in zip(a, b, c):
            assert x.shape == y.shape
            _close(x, y, z)

    seqs: list[_Seq] = []
    for _ in range(2):  # two prompts, each forked into several rows that share its blocks
        n = rng.randrange(9, 90)  # prefixes of one to several online-softmax blocks
        table = [free.pop() for _ in range(-(-n // BLOCK))]
        step([ExtendRequest(table, 0, [rng.randrange(3, 96) for _ in range(n)])])
        full = n // BLOCK  # whole blocks are shared; the partial last block is copied per row
        for _ in range(rng.randrange(2, 5)):
            own = table[:full] + [free.pop() for _ in table[full:]]
            for kvc in (native.kv, ref.kv, *([weights_only.kv] if weights_only else [])):
                kvc.copy_blocks(table[full:], own[full:])
            seqs.append(_Seq(own, n))
    steps_before = native.native_steps + native.native_attention_steps
    expected = 0  # steps with a row short enough to attend natively
    for _ in range(12):
        rows = rng.sample(seqs, rng.randrange(1, len(seqs) + 1))
        reqs = []
        budget = budget_per_step
        for s in rows:
            k = min(budget, 1 if rng.random() < 0.7 else rng.randrange(2, 6))
            if path == "attention" and rng.random() < 0.15:  # a row too long to attend natively
                k = min(budget, rng.randrange(NATIVE_ATTENTION_MAX_ROW + 1, 21))
            if k == 0:
                break
            budget -= k
            while len(s.table) * BLOCK < s.cached + k:
                s.table.append(free.pop())
            reqs.append(ExtendRequest(list(s.table), s.cached, [rng.randrange(3, 96)
                                                                for _ in range(k)],
                                      all_logits=k > 1))
            s.cached += k
        expected += any(len(r.new_token_ids) <= NATIVE_ATTENTION_MAX_ROW for r in reqs)
        step(reqs)
    ran = native.native_steps + native.native_attention_steps - steps_before
    assert ran == expected >= 10  # every step with a short row ran natively
    if path == "step":
        assert native.native_steps - steps_before == 12
    assert ref.native_steps == ref.native_attention_steps == 0
    _close(native.kv.k, ref.kv.k, weights_only.kv.k if weights_only else None)
    _close(native.kv.v, ref.kv.v, weights_only.kv.v if weights_only else None)
    if hydragen:
        assert native.hydragen_rows > 0  # prefix groups reached the native step


def test_step_plan_golden():
    plan = StepPlan.build(4, [[7, 2], [7, 5, 9], [3]], [5, 6, 0], [1, 2, 1], [([0, 1], 1)])
    assert plan.tables.tolist() == [[7, 2, 0], [7, 5, 9], [3, 0, 0]]
    assert plan.tok_off.tolist() == [0, 1, 3, 4]
    assert plan.own_from.tolist() == [4, 4, 0]
    assert plan.group_off.tolist() == [0, 2] and plan.group_rows.tolist() == [0, 1]


def _fields(plan: StepPlan, blocks: int) -> list[list[int]]:
    """A one-row plan's fields, its table cut to ``blocks`` (the rest is padding)."""
    return [plan.tables[0, :blocks].tolist(), plan.start.tolist(), plan.tok_off.tolist(),
            plan.own_from.tolist(), plan.group_off.tolist(), plan.group_rows.tolist(),
            plan.rope_off.tolist(), plan.token_ids.tolist()]


def test_refilled_one_row_plan_equals_a_built_one():
    """A decoding row's plan rewritten in place step after step (new blocks, a copy-on-write
    block swap, a dropped-token count) holds what a fresh build holds, its table padded with
    block 0; it refuses (untouched) another token count or a table past its width."""
    table, plan = [4, 9], StepPlan.build(4, [[4, 9]], [6], [1], (), [0], [11], spare=4)
    assert plan.width == 6 and plan.tables[0, 2:].tolist() == [0, 0, 0, 0]
    for pos in range(7, 21):
        if pos % 4 == 0:
            table.append(20 + pos)
        if pos == 13:
            table[1] = 99  # copy-on-write replaced a block
        dropped = 8 if pos > 16 else 0
        assert plan.refill(table, pos, [pos + 100], dropped)
        fresh = StepPlan.build(4, [table], [pos], [1], (), [dropped], [pos + 100])
        assert _fields(plan, len(table)) == _fields(fresh, len(table))
        assert plan.tables[0, len(table):].tolist() == [0] * (plan.width - len(table))
        assert plan.token_offsets == [0, 1]
    before = plan.flat.clone()
    assert not plan.refill(table, 21, [1, 2], 0)  # two tokens: another layout
    assert not plan.refill(table + [7], 21, [1], 0)  # past the width
    assert torch.equal(plan.flat, before)
    two = StepPlan.build(4, [[1], [2]], [0, 0], [1, 1], (), None, [5, 6])
    assert not two.refill([1], 1, [5], 0)  # only one-row plans


def test_native_step_off_when_disabled_or_not_float32(random_model_dir, monkeypatch):
    from metagen.engine.native import library as native_library

    model = load_model(random_model_dir("llama"), dtype=torch.bfloat16)
    assert for_model(model) is None  # bfloat16 weights: the PyTorch path
    monkeypatch.setenv("METAGEN_NATIVE", "0")
    native_library.library.cache_clear()
    try:
        assert for_model(load_model(random_model_dir("llama"))) is None
    finally:
        native_library.library.cache_clear()


def test_which_path_a_step_takes(random_model_dir):
    """A long row (prefill) goes to PyTorch; a token fits the native step; many decode rows,
    past the native step's limit, attend natively under PyTorch products."""
    native, _ = _runners(random_model_dir("llama"), True)
    n = max(native.native.max_tokens, NATIVE_ATTENTION_MAX_ROW) + 1
    table = list(range(1, 1 + -(-(n + 1) // BLOCK)))
    native.extend([ExtendRequest(table, 0, [5] * n)])
    assert (native.native_steps, native.native_attention_steps) == (0, 0)
    native.extend([ExtendRequest(table, n, [6])])
    assert (native.native_steps, native.native_attention_steps) == (1, 0)
    wide = native.native.max_tokens + 1
    native.extend([ExtendRequest([100 + i], 0, [7]) for i in range(wide)])
    assert (native.native_steps, native.native_attention_steps) == (1, 1)


def test_stories_greedy_200_tokens_through_the_native_step_equal_transformers(
        stories_path, stories_engine_factory, hf_greedy):
    """stories260K has head_dim 8: on AVX-512 every vector in the step is a partial (masked)
    one. At torch's default thread count (never forced to one): the step runs on those
    threads."""
    from metagen.types import SamplingParams

    engine = stories_engine_factory(block_size=16)
    if engine.runner.native is None:
        pytest.skip("no native library on this machine")
    prompt = engine.tokenizer("Once upon a time")["input_ids"]
    greedy = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True, logprobs=0)
    out = engine.generate([prompt], greedy)[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(stories_path, prompt, 200, banned=engine.eos_token_ids)
    assert engine.runner.native_steps >= 199  # every decode step ran natively
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < FLOAT_LOGPROB_TOL


def test_positions_or_blocks_out_of_range_never_reach_the_native_step(random_model_dir):
    """The C step trusts its indices; the runner sends anything out of range to PyTorch, whose
    own bounds checks raise."""
    native, _ = _runners(random_model_dir("llama"), True)
    with pytest.raises((IndexError, RuntimeError)):
        native.extend([ExtendRequest([NUM_BLOCKS + 5], 0, [7])])  # block id past the cache
    far = native.model.max_positions
    with pytest.raises((IndexError, RuntimeError)):
        native.extend([ExtendRequest([1] * (far // BLOCK + 1), far, [7])])  # no RoPE row
    assert native.native_steps == 0
