"""Engine test fixtures: small random-weight Hugging Face models saved to a folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def save_random_model(folder: Path, kind: str, seed: int = 0) -> Path:
    """A tiny random-weight model of ``kind`` in {llama, llama3rope, linrope, qwen2, qwen3,
    qwen3hd12, mistral}, with GQA (8 query heads, 2 KV heads), saved as config.json +
    model.safetensors. qwen3hd12: head_dim 12, a whole vector on no ISA (the kernels' masked
    paths); the others' 8 and 16 are whole AVX2 vectors."""
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
    elif kind == "qwen3hd12":
        cfg = Qwen3Config(**common, head_dim=12, tie_word_embeddings=False)
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


def _hf_greedy(folder: Path, prompt: list[int], steps: int, banned: tuple[int, ...] = ()
              ) -> tuple[list[int], list[float]]:
    """Reference greedy decoding with transformers' own forward and KV cache: token ids and the
    raw log-softmax of each chosen token. ``banned`` ids are never chosen (mirrors ignore_eos)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokens, logprobs = [], []
    ids = torch.tensor([prompt])
    past = None
    with torch.no_grad():
        for _ in range(steps):
            out = model(ids, past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()
            lp = torch.log_softmax(logits, -1)
            masked = logits.clone()
            masked[list(banned)] = float("-inf")
            tok = int(masked.argmax())
            tokens.append(tok)
            logprobs.append(float(lp[tok]))
            ids = torch.tensor([[tok]])
    return tokens, logprobs


@pytest.fixture(scope="session")
def hf_greedy():
    """The reference greedy decoder (a function; see _hf_greedy)."""
    return _hf_greedy


@pytest.fixture(scope="session")
def stories_engine_factory(stories_path):
    """Build an LLMEngine on stories260K sharing one loaded model and tokenizer."""
    from transformers import AutoTokenizer

    from metagen.engine.config import EngineConfig
    from metagen.engine.build import build_engine
    from metagen.engine.models import load_model

    model = load_model(stories_path)
    tok = AutoTokenizer.from_pretrained(str(stories_path))

    def make(**options):
        return build_engine(model, tok, EngineConfig(device="cpu", **options))

    return make
