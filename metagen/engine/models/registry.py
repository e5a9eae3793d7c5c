"""The architecture table: a Hugging Face architecture name (``config.json``'s
``architectures[0]``) -> its :class:`~metagen.engine.models.interface.ModelFamily` (config
parser, model class, weight names), as vLLM's model registry. The loader and
:meth:`ModelConfig.from_dict <metagen.engine.models.config.ModelConfig.from_dict>` look
architectures up here, and this table is the one place besides its own module that names a model
class: a new family is an entry."""

from __future__ import annotations

from functools import partial

from metagen.engine.models.config import llama_config
from metagen.engine.models.interface import ModelFamily
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.llama_weights import llama_weights
from metagen.errors import UnsupportedArchitectureError


def _llama_family(variant: str) -> ModelFamily:
    return ModelFamily(name=variant, parse_config=partial(llama_config, variant=variant),
                       model_class=LlamaModel, weights=llama_weights)


ARCHITECTURES: dict[str, ModelFamily] = {
    "LlamaForCausalLM": _llama_family("llama"),
    "MistralForCausalLM": _llama_family("mistral"),
    "Qwen2ForCausalLM": _llama_family("qwen2"),  # q/k/v bias
    "Qwen3ForCausalLM": _llama_family("qwen3"),  # RMSNorm on q and k per head
}


def family_of(architecture: str) -> ModelFamily:
    """The family of ``architecture``; raises :class:`UnsupportedArchitectureError` (a
    ``ModelLoadError``) naming it and listing the table's architectures otherwise."""
    family = ARCHITECTURES.get(architecture)
    if family is None:
        raise UnsupportedArchitectureError(
            f"architecture {architecture!r} is not supported by the built-in engine (supported: "
            f"{', '.join(ARCHITECTURES)}); use metagen.HFGenerator, which runs any "
            "transformers model")
    return family


__all__ = ["ARCHITECTURES", "family_of"]
