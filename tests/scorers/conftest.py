"""Tiny random-weight reward models (Llama heads) saved as Hugging Face folders."""

from __future__ import annotations

from pathlib import Path

import pytest


def _config(num_labels: int = 1):
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                       max_position_embeddings=256, num_labels=num_labels, pad_token_id=0,
                       tie_word_embeddings=False)


def save_model(model, tokenizer_src: Path, out: Path) -> Path:
    """``model`` saved in ``out`` with the tokenizer of ``tokenizer_src`` beside it."""
    from transformers import AutoTokenizer
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tokenizer_src).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def orm_path(tmp_path_factory, stories_path) -> Path:
    import torch
    from transformers import LlamaForSequenceClassification
    torch.manual_seed(0)
    return save_model(LlamaForSequenceClassification(_config()), stories_path,
                 tmp_path_factory.mktemp("orm"))


@pytest.fixture(scope="session")
def orm2_path(tmp_path_factory, stories_path) -> Path:
    import torch
    from transformers import LlamaForSequenceClassification
    torch.manual_seed(1)
    return save_model(LlamaForSequenceClassification(_config(2)), stories_path,
                 tmp_path_factory.mktemp("orm2"))


@pytest.fixture(scope="session")
def prm_path(tmp_path_factory, stories_path) -> Path:
    import torch
    from transformers import LlamaForTokenClassification
    torch.manual_seed(2)
    return save_model(LlamaForTokenClassification(_config()), stories_path,
                 tmp_path_factory.mktemp("prm"))
