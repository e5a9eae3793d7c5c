"""The engine's Llama-family forward equals transformers' (stories260K and random GQA models)."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models import ModelConfig, load_model
from metagen.engine.models.rope import inv_frequencies
from metagen.errors import ModelLoadError
from tests.tolerances import FLOAT_LOGPROB_TOL, RANDOM_MODEL_TOL

KINDS = ["llama", "llama3rope", "linrope", "qwen2", "qwen3", "mistral"]


def _runner(model, num_blocks=64, block_size=4):
    c = model.cfg
    kv = KVCache(c.num_layers, num_blocks, block_size, c.num_kv_heads, c.head_dim, model.dtype,
                 "cpu")
    return ModelRunner(model, kv)


@pytest.fixture(scope="module")
def random_models(random_model_dir):
    return {kind: random_model_dir(kind) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_prefill_and_chunked_logits_match_transformers(random_models, kind):
    from transformers import AutoModelForCausalLM

    path = random_models[kind]
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model = load_model(path)
    ids = torch.randint(3, 96, (150,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]  # (T, V)
    runner = _runner(model)
    table = list(range(63, 63 - 38, -1))  # non-contiguous, descending blocks
    full = runner.extend([ExtendRequest(table, 0, ids, all_logits=True)])[0]
    assert full.shape == ref.shape
    assert (full - ref).abs().max() < FLOAT_LOGPROB_TOL
    # the same tokens in ragged chunks on top of the cache (chunked prefill + decode steps)
    runner2 = _runner(model)
    got, pos = [], 0
    for n in (7, 1, 33, 1, 1, 60, 47):
        got.append(runner2.extend([ExtendRequest(table, pos, ids[pos:pos + n], True)])[0])
        pos += n
    assert (torch.cat(got) - ref).abs().max() < FLOAT_LOGPROB_TOL


def test_stories_logits_match_transformers(stories_path):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()
    model = load_model(stories_path)
    ids = [1, 403, 407, 261, 378] + list(range(10, 200))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    out = _runner(model).extend([ExtendRequest(list(range(60)), 0, ids, True)])[0]
    assert (out - ref).abs().max() < FLOAT_LOGPROB_TOL


def test_bfloat16_close_to_float32(stories_path):
    ids = [1, 403, 407, 261, 378, 11, 12, 13]
    f32 = _runner(load_model(stories_path)).extend([ExtendRequest([0, 1], 0, ids, True)])[0]
    bf = _runner(load_model(stories_path, dtype=torch.bfloat16)).extend(
        [ExtendRequest([0, 1], 0, ids, True)])[0]
    assert bf.dtype == torch.float32
    # bf16 has ~3 significant digits; the argmax agrees on most positions
    assert (bf.argmax(-1) == f32.argmax(-1)).float().mean() >= 0.75
    assert torch.allclose(bf.softmax(-1), f32.softmax(-1), atol=0.03)


def test_batched_rows_equal_single_rows(random_models):
    model = load_model(random_models["qwen3"])
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(3, 96, (n,), generator=g).tolist() for n in (5, 17, 1, 30)]
    singles = []
    for i, p in enumerate(prompts):
        singles.append(_runner(model).extend([ExtendRequest(list(range(10 * i, 10 * i + 10)), 0,
                                                            p, True)])[0])
    batched = _runner(model).extend([ExtendRequest(list(range(10 * i, 10 * i + 10)), 0, p, True)
                                     for i, p in enumerate(prompts)])
    for a, b in zip(singles, batched):
        assert (a - b).abs().max() < RANDOM_MODEL_TOL


def test_rope_llama3_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
              "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 64}
    cfg = LlamaConfig(hidden_size=256, num_attention_heads=4, rope_parameters=params)
    ref, _ = ROPE_INIT_FUNCTIONS["llama3"](cfg, "cpu")
    ours = inv_frequencies(64, 500000.0, params)
    assert torch.allclose(ours.float(), ref.float(), rtol=1e-5)


def test_unsupported_architecture_names_it_and_suggests_hf(tmp_path):
    with pytest.raises(ModelLoadError, match="GPT2LMHeadModel.*HFGenerator"):
        ModelConfig.from_dict({"architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(ModelLoadError, match="yarn"):
        ModelConfig.from_dict({"architectures": ["LlamaForCausalLM"], "vocab_size": 8,
                               "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                               "num_attention_heads": 2, "rope_parameters": {"rope_type": "yarn"}})
    with pytest.raises(ModelLoadError, match="config.json"):
        load_model(tmp_path)


def test_row_chunked_attention_equals_one_chunk(random_models, monkeypatch):
    """Attending rows in chunks (bounded transient memory) does not change the logits."""
    import metagen.engine.model_runner as model_runner

    model = load_model(random_models["llama"])
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, 96, (n,), generator=g).tolist() for n in (9, 3, 21, 1, 1)]
    tables = [list(range(8 * i, 8 * i + 8)) for i in range(len(prompts))]
    runner = _runner(model)
    runner.extend([ExtendRequest(t, 0, p) for t, p in zip(tables, prompts)])
    # decode rows mixed with multi-token rows on top of the cached prompts
    reqs = [ExtendRequest(t, len(p), [5] * k, True)
            for t, p, k in zip(tables, prompts, (1, 4, 1, 1, 7))]
    lens = [len(r.new_token_ids) for r in reqs]
    assert len(runner._partition(reqs, lens, list(range(5)))) == 2
    whole = runner.extend(reqs)
    monkeypatch.setattr(model_runner, "ATTN_CHUNK_BYTES", 1)  # one row per chunk
    assert len(runner._partition(reqs, lens, list(range(5)))) == 5
    chunked = runner.extend(reqs)
    singles = [runner.extend([r])[0] for r in reqs]
    for a, b, c in zip(whole, chunked, singles):
        assert (a - b).abs().max() < RANDOM_MODEL_TOL and (a - c).abs().max() < RANDOM_MODEL_TOL
