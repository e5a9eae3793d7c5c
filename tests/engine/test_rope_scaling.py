"""YaRN rope scaling (Peng et al. 2023): frequencies and attention factor equal transformers', and
the engine's greedy tokens and logprobs equal transformers' past the original context length."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.models import load_model
from metagen.engine.models.config import ModelConfig
from metagen.engine.models.rope import attention_scaling, inv_frequencies, rope_tables
from metagen.errors import ModelLoadError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
        "original_max_position_embeddings": 32}
YARN_VARIANTS = [
    YARN,
    {**YARN, "truncate": False, "beta_fast": 16, "beta_slow": 2},
    {**YARN, "attention_factor": 0.9},
    {**YARN, "factor": 8.0, "mscale": 0.707, "mscale_all_dim": 1.0},
    {**YARN, "factor": 1.0},
    {**YARN, "rope_theta": 1e6, "original_max_position_embeddings": 4096, "factor": 32.0},
]


def _base_config(**overrides):
    from transformers import LlamaConfig

    return LlamaConfig(**{**dict(vocab_size=96, hidden_size=64, intermediate_size=96,
                                 num_hidden_layers=2, num_attention_heads=4,
                                 num_key_value_heads=2, max_position_embeddings=128),
                          **overrides})


@pytest.mark.parametrize("params", YARN_VARIANTS)
def test_yarn_frequencies_and_attention_factor_equal_transformers(params):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = _base_config(rope_parameters=dict(params))
    ref_inv, ref_scale = ROPE_INIT_FUNCTIONS["yarn"](cfg, "cpu")
    ours = inv_frequencies(16, params["rope_theta"], params)
    # transformers computes in float32, we in float64: equal to float32 rounding
    assert torch.allclose(ours.float(), ref_inv.float(), rtol=1e-6, atol=0)
    assert attention_scaling(params) == pytest.approx(ref_scale, rel=1e-12)


def test_default_yarn_attention_factor_is_point_one_log_factor_plus_one():
    assert attention_scaling(YARN) == pytest.approx(0.1 * math.log(4.0) + 1)
    assert attention_scaling({"rope_type": "linear", "factor": 4.0}) == 1.0
    assert attention_scaling({}) == 1.0


def test_rope_tables_scale_cos_and_sin_by_the_attention_factor():
    inv = inv_frequencies(16, 10000.0, YARN)
    cos, sin = rope_tables(inv, 40, torch.float32, "cpu", attention_scale=attention_scaling(YARN))
    plain_cos, plain_sin = rope_tables(inv, 40, torch.float32, "cpu")
    scale = 0.1 * math.log(4.0) + 1
    assert cos.shape == sin.shape == (40, 16)
    assert torch.allclose(cos, plain_cos * scale) and torch.allclose(sin, plain_sin * scale)
    # cos^2 + sin^2 = scale^2 at every position: the factor multiplies q.k by scale^2
    assert torch.allclose(cos ** 2 + sin ** 2, torch.full_like(cos, scale ** 2), atol=1e-5)


def _arch(kind: str) -> dict:
    return {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[kind]


def _minimal(rope: dict, **extra) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8,
            "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
            "max_position_embeddings": 256, "rope_parameters": rope, **extra}


def test_yarn_config_reads_like_transformers():
    # factor: null means max_position_embeddings / original (DeepSeek-V3 configs)
    cfg = ModelConfig.from_dict(_minimal({**YARN, "factor": None}))
    assert cfg.rope_scaling["factor"] == 256 / 32
    # a missing original_max_position_embeddings defaults to max_position_embeddings ...
    cfg = ModelConfig.from_dict(_minimal({"rope_type": "yarn", "factor": 2.0}))
    assert cfg.rope_scaling["original_max_position_embeddings"] == 256
    # ... and a top-level one (Phi-3 style) wins over the dict's
    cfg = ModelConfig.from_dict(_minimal(dict(YARN), original_max_position_embeddings=64))
    assert cfg.rope_scaling["original_max_position_embeddings"] == 64
    with pytest.raises(ModelLoadError, match="yarn.*factor"):
        ModelConfig.from_dict(_minimal({"rope_type": "yarn"}))


def test_dynamic_ntk_is_rejected_saying_why():
    with pytest.raises(ModelLoadError, match="dynamic.*KV cache.*HFGenerator"):
        ModelConfig.from_dict(_minimal({"rope_type": "dynamic", "factor": 2.0}))


def _save_yarn_model(folder: Path, kind: str) -> Path:
    """A random-weight GQA model whose yarn rope has original_max_position_embeddings=32."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128,
                  initializer_range=0.2, bos_token_id=1, eos_token_id=2,
                  rope_parameters=dict(YARN))
    cfg = (LlamaConfig(**common) if kind == "llama" else
           Qwen2Config(**common, tie_word_embeddings=True))
    torch.manual_seed(11)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    out = folder / f"yarn_{kind}"
    model.save_pretrained(out)
    return out


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_yarn_engine_greedy_equals_transformers_past_original_context(tmp_path, kind, hf_greedy):
    folder = _save_yarn_model(tmp_path, kind)
    model = load_model(folder)
    assert model.cfg.rope_scaling["rope_type"] == "yarn"
    assert model.cfg.architecture == _arch(kind)
    engine = build_engine(model, None, EngineConfig(device="cpu", block_size=8))
    g = torch.Generator().manual_seed(4)
    prompt = [1] + torch.randint(3, 96, (47,), generator=g).tolist()  # 48 > 32 tokens
    steps = 40  # positions up to 87: well past the original 32
    out = engine.generate([prompt], SamplingParams(temperature=0.0, max_tokens=steps,
                                                   ignore_eos=True))[0].outputs[0]
    ref_tokens, ref_lps = hf_greedy(folder, prompt, steps, banned=engine.eos_token_ids)
    assert list(out.token_ids) == ref_tokens
    assert max(abs(a - b) for a, b in zip(out.logprobs, ref_lps)) < FLOAT_LOGPROB_TOL
    # the attention factor reached the model's tables: cos(0 * f) = 1 times the factor
    assert float(model.cos[0, 0]) == pytest.approx(0.1 * math.log(4.0) + 1, rel=1e-6)
