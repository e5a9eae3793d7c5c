"""The architecture table (metagen.engine.models.registry) and the engine core's shape: an unknown
architecture is refused naming it and listing the table; every entry parses its own config,
builds a model of the CausalLM interface and names its weights; LLMEngine.step stays one screen
(propose -> schedule -> run -> postprocess)."""

from __future__ import annotations

import inspect
import json
import shutil

import pytest

from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models import ARCHITECTURES, CausalLM, ModelConfig, family_of, load_model
from metagen.errors import ModelLoadError, UnsupportedArchitectureError

SMALL = {"vocab_size": 8, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
         "num_attention_heads": 2}


def test_an_unknown_architecture_names_it_and_lists_the_table(tmp_path, stories_path):
    with pytest.raises(ModelLoadError) as info:
        family_of("GPT2LMHeadModel")
    assert isinstance(info.value, UnsupportedArchitectureError)
    assert "GPT2LMHeadModel" in str(info.value)
    assert all(arch in str(info.value) for arch in ARCHITECTURES)
    folder = tmp_path / "gpt2"
    shutil.copytree(stories_path, folder)
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "architectures": ["GPT2LMHeadModel"]}))
    with pytest.raises(UnsupportedArchitectureError, match="GPT2LMHeadModel.*LlamaForCausalLM"):
        load_model(folder)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_each_family_parses_its_config_and_names_its_weights(arch):
    family = ARCHITECTURES[arch]
    cfg = ModelConfig.from_dict({"architectures": [arch], **SMALL})
    assert cfg.architecture == arch
    names = family.weights(cfg)
    assert names.embedding in names.shapes
    parts = [n for ns in (*names.projections.values(), *names.tensors.values()) for n in ns]
    assert sorted(parts) == sorted(names.shapes)  # every stored tensor goes somewhere, once
    model: CausalLM = family.model_class(cfg, 16)
    assert model.cfg is cfg and model.max_positions == 16
    assert {f"{n}" for n in names.projections} >= {
        f"layers.0.{name}" for m, name in model.projections()[:4]}
    assert (model.untied_head() is None) == cfg.tie_word_embeddings
    assert (cfg.qk_norm, cfg.attention_bias) == (arch == "Qwen3ForCausalLM",
                                                 arch == "Qwen2ForCausalLM")


def test_the_engine_step_reads_in_one_screen():
    """A guard on the step's shape: its phases live in their own methods and modules."""
    source = inspect.getsource(LLMEngine.step)
    body = source.split('"""')[2]  # after the docstring
    assert len(body.strip().splitlines()) <= 25, body
    for phase in ("propose", "schedule", "_run", "collect_finished"):
        assert phase in body
