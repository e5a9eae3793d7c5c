"""Engine outputs equal transformers and equal themselves across batching, caching, forking."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.models import load_model
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL, RANDOM_MODEL_TOL

GREEDY = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)


def _prompts(n, vocab, seed=0, lo=3, hi=40):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [[1] + torch.randint(3, vocab, (k,), generator=g).tolist() for k in lens]


def test_stories_greedy_200_tokens_equal_transformers(stories_path, stories_engine_factory,
                                                      hf_greedy):
    engine = stories_engine_factory(block_size=16)
    prompt = engine.tokenizer("Once upon a time")["input_ids"]
    out = engine.generate([prompt], GREEDY)[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(stories_path, prompt, 200, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < FLOAT_LOGPROB_TOL
    assert out.text.startswith(", there was a little girl named Lily. She loved to play outside "
                               "in the park.")


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_random_gqa_models_greedy_200_tokens_equal_transformers(random_model_dir, kind, hf_greedy):
    folder = random_model_dir(kind)
    engine = build_engine(load_model(folder), None, EngineConfig(device="cpu", block_size=8))
    prompt = _prompts(1, 96, seed=3)[0]
    out = engine.generate([prompt], GREEDY)[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(folder, prompt, 200, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < FLOAT_LOGPROB_TOL


@pytest.fixture(scope="module")
def qwen3(random_model_dir):
    return load_model(random_model_dir("qwen3"))


def _engine(model, **options):
    return build_engine(model, None, EngineConfig(device="cpu", **options))


def _same(a, b, tol=RANDOM_MODEL_TOL):  # float32 rounding (tests/tolerances.py)
    assert [list(c.token_ids) for c in a.outputs] == [list(c.token_ids) for c in b.outputs]
    for x, y in zip(a.outputs, b.outputs):
        assert max((abs(p - q) for p, q in zip(x.logprobs, y.logprobs)), default=0) < tol


def test_batched_equals_unbatched_and_chunked_prefill(qwen3):
    prompts = _prompts(6, 96, seed=5, hi=70)
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    batched = _engine(qwen3, block_size=8).generate(prompts, params)
    for p, b in zip(prompts, batched):
        _same(_engine(qwen3, block_size=4).generate([p], params)[0], b)
    chunked = _engine(qwen3, block_size=8, max_num_batched_tokens=16).generate(prompts, params)
    for a, b in zip(chunked, batched):
        _same(a, b)


def test_prefix_cache_on_equals_off_and_counts_cached_tokens(qwen3):
    base = _prompts(1, 96, seed=7, lo=40, hi=41)[0]
    prompts = [base + tail for tail in ([5, 6], [7], [8, 9, 10], [11] * 5)]
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    on = _engine(qwen3, block_size=8, prefix_cache=True)
    first = on.generate(prompts[:1], params)
    rest = on.generate(prompts[1:], params)  # served from the cache of the first call
    off = _engine(qwen3, block_size=8, prefix_cache=False).generate(prompts, params)
    for a, b in zip(first + rest, off):
        _same(a, b)
    assert all(r.num_cached_tokens == 40 for r in rest)  # 41-token prefix -> 5 whole blocks
    assert on.counters.cached_prompt_tokens == 120
    on.check_integrity()


def test_fork_equals_separate_requests(qwen3):
    prompt = _prompts(1, 96, seed=9)[0]
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    ref = _engine(qwen3).generate([prompt], params)[0].outputs[0]
    engine = _engine(qwen3, block_size=4)
    rid = engine.add_request(prompt, params)
    for _ in range(7):
        engine.step()
    parent = engine.requests[rid].seqs[0]
    engine.fork(parent.seq_id, 2)
    engine.check_integrity()
    out = engine.run_until_done([rid])[0]
    assert len(out.outputs) == 3
    for c in out.outputs:
        assert c.token_ids == ref.token_ids
    assert engine.blocks.num_free + engine.radix.num_cached_blocks == engine.blocks.num_blocks


def test_n_samples_prefill_once_and_seeded_samples_independent_of_batch(qwen3):
    prompt = _prompts(1, 96, seed=11, lo=30, hi=31)[0]
    params = SamplingParams(temperature=1.0, n=5, seed=1234, max_tokens=25, ignore_eos=True)
    alone_engine = _engine(qwen3, block_size=8, prefix_cache=False)
    alone = alone_engine.generate([prompt], params)[0]
    # computed tokens: the prompt once, then one token per sample per later step
    assert alone_engine.counters.computed_tokens == len(prompt) + 5 * 24
    crowd = _engine(qwen3, block_size=8, max_num_batched_tokens=24).generate(
        _prompts(7, 96, seed=12) + [prompt],
        [SamplingParams(temperature=0.8, seed=i, max_tokens=20) for i in range(7)] + [params])[-1]
    _same(alone, crowd)
    assert len({c.token_ids for c in alone.outputs}) > 1  # the samples differ from each other


def test_hydragen_on_equals_off(qwen3):
    prompts = _prompts(3, 96, seed=13, lo=35, hi=60)
    params = SamplingParams(temperature=1.0, n=4, seed=99, max_tokens=20, ignore_eos=True)
    on_engine = _engine(qwen3, block_size=8, hydragen=True, hydragen_min_prefix=0)
    on = on_engine.generate(prompts, params)
    off = _engine(qwen3, block_size=8, hydragen=False).generate(prompts, params)
    for a, b in zip(on, off):
        _same(a, b, tol=FLOAT_LOGPROB_TOL)
    assert on_engine.runner.hydragen_rows > 0  # the shared-prefix path actually ran


def test_stop_token_ids_and_max_tokens(qwen3):
    prompt = _prompts(1, 96, seed=15)[0]
    free = _engine(qwen3).generate([prompt], SamplingParams(temperature=0.0, max_tokens=20,
                                                            ignore_eos=True))[0].outputs[0]
    stop_tok = free.token_ids[4]
    first = free.token_ids.index(stop_tok)
    out = _engine(qwen3).generate([prompt], SamplingParams(
        temperature=0.0, max_tokens=20, ignore_eos=True, stop_token_ids=(stop_tok,)))[0]
    c = out.outputs[0]
    assert c.token_ids == free.token_ids[:first + 1]
    assert (c.finish_reason, c.stop_reason) == ("stop", stop_tok)
    assert free.finish_reason == "length" and len(free.token_ids) == 20


def test_bfloat16_engine_generates_like_float32(stories_path):
    from metagen.generators.local import LocalGenerator

    params = SamplingParams(temperature=0.0, max_tokens=12)
    bf = LocalGenerator.from_pretrained(stories_path, dtype="bfloat16", device="cpu")
    f32 = LocalGenerator.from_pretrained(stories_path, device="cpu")
    a = bf.generate(["Once upon a time"], params)[0][0]
    b = f32.generate(["Once upon a time"], params)[0][0]
    assert bf.engine.kv.k.dtype == torch.bfloat16
    assert a.token_ids[:5] == b.token_ids[:5]  # bf16 rounding may flip a later near-tie
    assert all(abs(x - y) < 0.1 for x, y in zip(a.logprobs[:5], b.logprobs[:5]))
