"""Loading fails loudly: every broken checkpoint is a one-line ``ModelLoadError`` naming the file
or field, raised before any large allocation, and never an "unsupported architecture" (which is
the only reason ``--backend auto`` may move on to transformers)."""

from __future__ import annotations

import json

import pytest
import torch

from metagen.engine.config import EngineConfig
from metagen.engine.models import ModelConfig, load_model
from metagen.errors import (
    DeviceUnavailableError,
    InvalidParameterError,
    ModelLoadError,
    UnsupportedArchitectureError,
)
from metagen.generators.local import LocalGenerator
from tests.broken_checkpoints import BROKEN, copy_checkpoint, edit_config


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_checkpoint_is_one_line_naming_the_culprit(tmp_path, stories_path, case) -> None:
    break_it, named = BROKEN[case]
    folder = copy_checkpoint(stories_path, tmp_path / case)
    break_it(folder)
    with pytest.raises(ModelLoadError) as info:
        LocalGenerator.from_pretrained(folder, device="cpu")
    message = str(info.value)
    assert not isinstance(info.value, UnsupportedArchitectureError)
    assert named in message and len(message.splitlines()) == 1, message
    with pytest.raises(ModelLoadError, match=named.replace(".", r"\.")):
        load_model(folder)


def test_more_layers_than_weights_says_how_many_are_stored(tmp_path, stories_path) -> None:
    folder = copy_checkpoint(stories_path, tmp_path / "m")
    edit_config(num_hidden_layers=50)(folder)
    with pytest.raises(ModelLoadError, match="num_hidden_layers=50 but the checkpoint holds "
                       "weights for 5 layers"):
        load_model(folder)
    edit_config(num_hidden_layers=3)(folder)  # fewer layers than stored is as inconsistent
    with pytest.raises(ModelLoadError, match="num_hidden_layers=3 .* 5 layers"):
        load_model(folder)


def test_a_missing_weight_is_named(tmp_path, stories_path) -> None:
    from safetensors.torch import load_file, save_file

    folder = copy_checkpoint(stories_path, tmp_path / "m")
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.norm.weight"], tensors["model.layers.2.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelLoadError, match=r"2 weights are missing from .*: 'norm\.weight', "
                       r"'layers\.2\.mlp\.up_proj\.weight'$"):
        load_model(folder)


def test_unsupported_architecture_and_bin_checkpoint_are_the_fallback_kind(tmp_path,
                                                                          stories_path) -> None:
    with pytest.raises(UnsupportedArchitectureError, match="GPT2LMHeadModel"):
        ModelConfig.from_dict({"architectures": ["GPT2LMHeadModel"]})
    folder = copy_checkpoint(stories_path, tmp_path / "bin")
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(UnsupportedArchitectureError, match=r"\.bin"):
        load_model(folder)


def test_absurd_max_positions_builds_rope_only_for_what_the_cache_holds(tmp_path,
                                                                       stories_path) -> None:
    """A config claiming 10^9 positions (32 GB of cos/sin in float32 at head_dim 8) loads with
    tables no longer than the KV cache can use, and generates as the original does."""
    folder = copy_checkpoint(stories_path, tmp_path / "m")
    edit_config(max_position_embeddings=1_000_000_000)(folder)
    gen = LocalGenerator.from_pretrained(folder, device="cpu")
    engine = gen.engine
    cfg = ModelConfig.from_folder(folder)
    assert engine.model.cos.shape == engine.model.sin.shape == (engine.max_model_len, 8)
    assert engine.max_model_len == EngineConfig(device="cpu").max_positions(cfg)
    assert engine.max_model_len <= engine.kv.num_blocks * engine.config.block_size < 10**6
    from metagen.types import SamplingParams

    comp = gen.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=12))[0][0]
    assert comp.text.startswith(", there was a little girl named Lily")


def test_engine_config_max_positions() -> None:
    cfg = ModelConfig.from_dict(json.loads(
        '{"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 16, '
        '"intermediate_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2, '
        '"num_key_value_heads": 1, "max_position_embeddings": 1000000000}'))
    per_token = 2 * 2 * 1 * 8 * 4  # K and V, 2 layers, 1 KV head of 8, float32
    assert EngineConfig(device="cpu", max_model_len=300).max_positions(cfg) == 300
    assert EngineConfig(device="cpu", num_blocks=4, block_size=16).max_positions(cfg) == 64
    assert EngineConfig(device="cpu", kv_cache_bytes=1 << 20, block_size=16).max_positions(
        cfg) == (1 << 20) // (16 * per_token) * 16
    assert EngineConfig(device="cpu").max_positions(cfg) == (64 << 20) // per_token
    small = ModelConfig.from_dict({**cfg_dict(cfg), "max_position_embeddings": 512})
    assert EngineConfig(device="cpu").max_positions(small) == 512


def cfg_dict(cfg: ModelConfig) -> dict:
    return {"architectures": [cfg.architecture], "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size,
            "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
            "num_key_value_heads": cfg.num_kv_heads}


@pytest.mark.parametrize("device", ["bogus", "cuda:99", "meta", "cuda"])
def test_unavailable_device_is_a_load_error_naming_device(stories_path, device) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    with pytest.raises(DeviceUnavailableError, match="device") as info:
        LocalGenerator.from_pretrained(stories_path, device=device)
    assert isinstance(info.value, ModelLoadError) and isinstance(info.value, InvalidParameterError)
    with pytest.raises(DeviceUnavailableError):
        EngineConfig(device=device)


def test_a_corrupt_tokenizer_is_one_line_naming_it(tmp_path, stories_path) -> None:
    folder = copy_checkpoint(stories_path, tmp_path / "tok")
    (folder / "tokenizer.json").write_text('{"version": "1.0", "model": {"type": "BPE"')
    with pytest.raises(ModelLoadError) as info:
        LocalGenerator.from_pretrained(folder, device="cpu")
    assert "tokenizer" in str(info.value) and len(str(info.value).splitlines()) == 1
