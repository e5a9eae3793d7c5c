"""Engine test fixtures: small random-weight Hugging Face models saved to a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def save_random_model(folder: Path, kind: str, seed: int = 0) -> Path:
    """A tiny random-weight model of ``kind`` in {llama, llama3rope, linrope, qwen2, qwen3, mistral},
    with GQA (8 query heads, 2 KV heads), saved as config.json + model.safetensors."""
    from transformers import (AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config,
                              Qwen3Config)

    common = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
                  initializer_range=0.2, bos_token_id=1, eos_token_id=2)
    if kind == "llama":
        cfg = LlamaConfig(**common, tie_word_embeddings=False)
    elif kind == "llama3rope":
        cfg = LlamaConfig(**common, rope_parameters={
            "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    elif kind == "linrope":
        cfg = LlamaConfig(**common, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0,
                                                      "factor": 2.0})
    elif kind == "qwen2":
        cfg = Qwen2Config(**common, tie_word_embeddings=True)
    elif kind == "qwen3":
        cfg = Qwen3Config(**common, head_dim=16, tie_word_embeddings=False)
    elif kind == "mistral":
        cfg = MistralConfig(**common, sliding_window=None)
    else:
        raise ValueError(kind)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():  # make the q/k norms and biases non-trivial
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.3)
    out = folder / kind
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def random_model_dir(tmp_path_factory):
    """Function kind -> folder of a saved random model (cached per session)."""
    root = tmp_path_factory.mktemp("random_models")
    cache: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in cache:
            cache[kind] = save_random_model(root, kind)
        return cache[kind]

    return get
