"""Llama-family decoder models for the engine (Llama 2/3, Mistral, Qwen2/2.5, Qwen3)."""

from metagen.engine.models.config import ModelConfig
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.loader import load_model

__all__ = ["LlamaModel", "ModelConfig", "load_model"]
