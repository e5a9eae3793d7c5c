"""Decoder models for the engine: the interface (:class:`CausalLM`, :class:`ModelFamily`), the
architecture table (``ARCHITECTURES``: Llama 2/3, Mistral, Qwen2/2.5, Qwen3, all run by
:class:`~metagen.engine.models.llama.LlamaModel`) and the loader."""

from metagen.engine.models.config import ModelConfig
from metagen.engine.models.interface import CausalLM, ModelFamily, WeightNames
from metagen.engine.models.loader import load_model
from metagen.engine.models.registry import ARCHITECTURES, family_of

__all__ = ["ARCHITECTURES", "CausalLM", "ModelConfig", "ModelFamily", "WeightNames", "family_of",
           "load_model"]
