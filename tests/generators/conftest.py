"""Fixtures: the stories260K HFGenerator and a small random-weight Llama saved as a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def stories_gen(stories_path):
    from metagen.generators.hf import HFGenerator
    return HFGenerator.from_pretrained(stories_path)


@pytest.fixture(scope="session")
def random_llama_path(tmp_path_factory, stories_path) -> Path:
    """A random-weight Llama (GQA, untied head, 2 layers) with the stories tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # sharper logits than the 0.02-std init, so greedy is well separated
        model.lm_head.weight.mul_(20.0)
    folder = tmp_path_factory.mktemp("random_llama")
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(stories_path / name, folder / name)
    return folder


@pytest.fixture(scope="session")
def random_gpt2_path(tmp_path_factory, stories_path) -> Path:
    """A random-weight GPT-2 (an architecture the built-in engine does not run)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=512, n_positions=128, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=1, eos_token_id=2)
    model = GPT2LMHeadModel(cfg)
    folder = tmp_path_factory.mktemp("random_gpt2")
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(stories_path / name, folder / name)
    return folder
