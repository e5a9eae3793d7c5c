"""FLOP estimate: golden values on a tiny config, and parameter counting on a real model."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.generators.flops import FlopModel, flop_model_of


def test_forward_golden() -> None:
    fm = FlopModel(matmul_params=100, layers=2, attn_dim=4)
    # 3 tokens at positions 0,1,2 attend to 1+2+3 = 6 positions
    assert fm.forward(0, 3) == 2 * 100 * 3 + 4 * 2 * 4 * 6
    # positions 3,4 attend to 4+5 = 9
    assert fm.forward(3, 2) == 2 * 100 * 2 + 4 * 2 * 4 * 9
    assert fm.forward(5, 0) == 0.0
    # prefill 3, generate 3: the last generated token is never fed back
    assert fm.sequence(3, 3) == fm.forward(0, 3) + fm.forward(3, 2)
    assert fm.sequence(3, 0) == fm.forward(0, 3)
    with pytest.raises(InvalidParameterError):
        FlopModel(matmul_params=-1, layers=1, attn_dim=1)


def test_flop_model_of_tied_llama(stories_path) -> None:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(stories_path)
    fm = flop_model_of(model)
    total = sum(p.numel() for p in model.parameters() if p.dim() >= 2)  # tied head once
    assert fm.matmul_params == total
    # layers x (q, k, v, o + 3 MLP matrices) + the tied head: the engine's own count
    assert total == 5 * (64 * 8 * (8 * 2 + 4 * 2) + 3 * 64 * 172) + 512 * 64
    assert (fm.layers, fm.attn_dim) == (5, 64)


def test_flop_model_of_untied_excludes_lookup_table() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    total = sum(p.numel() for p in model.parameters() if p.dim() >= 2)
    assert flop_model_of(model).matmul_params == total - 64 * 16
