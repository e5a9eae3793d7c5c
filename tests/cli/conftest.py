"""Fixtures for the CLI tests: a random-weight GPT-2 folder (an architecture the engine lacks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def random_gpt2_path(tmp_path_factory, stories_path) -> Path:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=512, n_positions=128, n_embd=32, n_layer=2, n_head=2,
                     bos_token_id=1, eos_token_id=2)
    folder = tmp_path_factory.mktemp("cli_gpt2")
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(stories_path / name, folder / name)
    return folder
