"""The engine on a CUDA device: the same tokens as transformers and as the engine on CPU.

The native kernels are CPU code; on CUDA every step runs PyTorch's products and the engine's
paged attention in torch. These tests skip on a machine without a GPU (CI has none); on a GPU
host run ``python -m pytest tests/engine/test_cuda.py``. Bounds: greedy tokens equal exactly
(tiny fp32 models, TF32 off: PyTorch's default for fp32 products), logprobs within 1e-3 of
the CPU reference (fp32 sums in another order)."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.beam_params import BeamSearchParams
from metagen.engine.llm_engine import LLMEngine
from metagen.types import SamplingParams

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA device (run on a GPU host)")

GREEDY = SamplingParams(temperature=0.0, max_tokens=200, ignore_eos=True)
TOL = 1e-3


def _prompts(n: int, vocab: int, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(3, 40, (n,), generator=g).tolist()
    return [[1] + torch.randint(3, vocab, (k,), generator=g).tolist() for k in lens]


def _engine(path, device: str, **options) -> LLMEngine:
    return LLMEngine.from_pretrained(path, tokenizer=False, device=device, **options)


def _tokens(outputs) -> list[list[list[int]]]:
    return [[list(c.token_ids) for c in o.outputs] for o in outputs]


def test_the_kv_cache_and_weights_live_on_the_gpu(stories_path):
    engine = _engine(stories_path, "cuda", block_size=16)
    assert torch.device(engine.model.device).type == "cuda"
    assert engine.kv.k[0].device.type == engine.kv.v[0].device.type == "cuda"
    out = engine.generate([[1, 400, 500]], SamplingParams(temperature=0, max_tokens=4))[0]
    assert len(out.outputs[0].token_ids) == 4


def test_stories_greedy_200_tokens_equal_transformers(stories_path, hf_greedy):
    engine = _engine(stories_path, "cuda", block_size=16)
    prompt = [1, 403, 407, 261, 378]  # "Once upon a time"
    out = engine.generate([prompt], GREEDY)[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(stories_path, prompt, 200, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < TOL


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_random_gqa_models_greedy_equal_transformers(random_model_dir, kind, hf_greedy):
    folder = random_model_dir(kind)
    engine = _engine(folder, "cuda", block_size=8)
    prompt = _prompts(1, 96, seed=3)[0]
    out = engine.generate([prompt], GREEDY)[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(folder, prompt, 200, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < TOL


@pytest.mark.parametrize("options", [
    {"prefix_cache": True, "hydragen": False},
    {"prefix_cache": False, "hydragen": False},
    {"prefix_cache": True, "hydragen": True, "hydragen_min_prefix": 8},
    {"prefix_cache": True, "max_num_batched_tokens": 24},  # chunked prefill
])
def test_a_batch_on_cuda_equals_the_batch_on_cpu(random_model_dir, options):
    folder = random_model_dir("qwen3")
    shared = _prompts(1, 96, seed=5)[0] * 2
    prompts = [shared + p for p in _prompts(6, 96, seed=7)]
    params = SamplingParams(temperature=0.0, max_tokens=48, ignore_eos=True, logprobs=0)
    gpu = _engine(folder, "cuda", block_size=8, **options).generate(prompts, params)
    cpu = _engine(folder, "cpu", block_size=8, **options).generate(prompts, params)
    assert _tokens(gpu) == _tokens(cpu)
    for g, c in zip(gpu, cpu):
        lg, lc = g.outputs[0].logprobs, c.outputs[0].logprobs
        assert max(abs(a - b) for a, b in zip(lg, lc)) < TOL


def test_seeded_samples_repeat_and_n_prefills_once(random_model_dir):
    folder = random_model_dir("llama")
    prompt = _prompts(1, 96, seed=9)[0]
    params = SamplingParams(n=8, temperature=1.0, max_tokens=32, ignore_eos=True, seed=11)
    first = _engine(folder, "cuda", block_size=8)
    a = first.generate([prompt], params)
    b = _engine(folder, "cuda", block_size=8).generate([prompt], params)
    assert _tokens(a) == _tokens(b)
    assert len({tuple(t) for t in _tokens(a)[0]}) > 1  # 8 samples of a random model differ
    prefilled = first.counters.computed_tokens - first.counters.generated_tokens
    assert prefilled <= len(prompt) + 8  # the prompt once, not once per sample


@pytest.mark.parametrize("params", [
    BeamSearchParams(num_beams=4, max_tokens=24),
    BeamSearchParams(num_beams=6, max_tokens=12, num_return_sequences=6, num_beam_groups=3,
                     diversity_penalty=1.5),
], ids=["beam", "diverse"])
def test_beam_search_on_cuda_equals_cpu(random_model_dir, params):
    folder = random_model_dir("llama")
    prompt = _prompts(1, 96, seed=13)[0]
    gpu = _engine(folder, "cuda", block_size=8).generate([prompt], params)
    cpu = _engine(folder, "cpu", block_size=8).generate([prompt], params)
    assert _tokens(gpu) == _tokens(cpu)


def test_stochastic_beam_on_cuda_equals_cpu(random_model_dir):
    from metagen.engine.beam_search import stochastic_beam_search

    folder = random_model_dir("llama")
    prompt = _prompts(1, 96, seed=15)[0]
    params = BeamSearchParams(num_beams=8, max_tokens=6)
    gpu = stochastic_beam_search(_engine(folder, "cuda", block_size=8), [prompt], params, seed=3)
    cpu = stochastic_beam_search(_engine(folder, "cpu", block_size=8), [prompt], params, seed=3)
    assert gpu[0].beams == cpu[0].beams and len(set(gpu[0].beams)) == 8


@pytest.mark.parametrize("mode", ["ngram", "draft", "draft tree"])
def test_speculative_greedy_equals_plain_greedy_on_cuda(stories_path, mode):
    """Speculative greedy on the GPU is plain greedy; ``draft tree``: the draft's next best
    tokens beside its first two drafts, verified under the PyTorch path's tree mask."""
    from metagen.engine.draft_proposer import DraftModelProposer
    from metagen.engine.proposers import NgramProposer
    from metagen.engine.speculative_decoding import Speculator

    prompt = [1, 403, 407, 261, 378] * 3
    params = SamplingParams(temperature=0.0, max_tokens=64, ignore_eos=True)
    plain = _engine(stories_path, "cuda", block_size=16).generate([prompt], params)
    proposer = (DraftModelProposer(_engine(stories_path, "cuda", block_size=16),
                                   tree=(2, 1) if mode == "draft tree" else ())
                if mode.startswith("draft") else NgramProposer(max_ngram=3))
    target = _engine(stories_path, "cuda", block_size=16)
    spec = build_engine(target.model, None, target.config, speculator=Speculator(proposer, 3))
    out = spec.generate([prompt], params)
    assert _tokens(out) == _tokens(plain)
    if mode == "draft":  # the draft is the target itself: every proposal is accepted
        assert spec.speculator.stats.acceptance_rate == 1.0
    if mode == "draft tree":  # ... every chain draft: no round ends on a leaf
        assert spec.speculator.stats.leaves_accepted == 0
        assert set(spec.speculator.stats.acceptance_by_depth) == {1.0}


def test_bfloat16_on_cuda_follows_float32(stories_path):
    prompt = [1, 403, 407, 261, 378]
    params = SamplingParams(temperature=0.0, max_tokens=32, ignore_eos=True)
    f32 = _engine(stories_path, "cuda", block_size=16).generate([prompt], params)
    bf16 = _engine(stories_path, "cuda", block_size=16, dtype="bfloat16").generate([prompt],
                                                                                   params)
    a, b = _tokens(f32)[0][0], _tokens(bf16)[0][0]
    assert a[:8] == b[:8]  # bf16 drifts later on a 260K-parameter model, never at once
