"""Quantize a loaded model's weights in place: ``quantization="int8"`` replaces every linear
projection (q|k|v, o, gate|up, down, and an untied LM head) by an
:class:`~metagen.engine.models.int8.Int8Weight` (int8, one float32 scale per output channel);
``"w8a8"`` by the same weights that also quantize their activations (``act8``).
Embeddings, norms and biases stay as loaded; a tied LM head is the embedding table and stays
too. Works on any checkpoint :func:`~metagen.engine.models.loader.load_model` loads, since it
runs on the loaded model, one projection at a time (the float copy of each is freed as it goes).
On CPU the int8 weights share one buffer on huge pages, as the loader's float ones do
(:class:`~metagen.engine.models.weight_arena.WeightArena`: decoding streams them all).
"""

from __future__ import annotations

import torch
from torch import nn

from metagen.engine.config import Quantization, check_quantization
from metagen.engine.models.int8 import Int8Weight
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.weight_arena import WeightArena

PROJECTIONS = ("qkv", "o", "gate_up", "down")


def _swap(module: nn.Module, name: str, act8: bool, arena: WeightArena | None) -> None:
    weight = getattr(module, name)
    quantized = Int8Weight.from_in_out(weight, act8)
    if arena is not None:
        quantized.q = arena.take(quantized.q.shape).copy_(quantized.q)
    delattr(module, name)  # a registered parameter cannot be reassigned a module
    setattr(module, name, quantized)


def quantization_of(model: LlamaModel) -> Quantization | None:
    """How ``model``'s projections are stored: ``"int8"`` or ``"w8a8"`` once
    :func:`quantize_model` ran on it, else ``None`` (as loaded)."""
    qkv = model.layers[0].qkv
    return None if not isinstance(qkv, Int8Weight) else "w8a8" if qkv.act8 else "int8"


def quantize_model(model: LlamaModel, quantization: Quantization | None) -> LlamaModel:
    """``model`` with its projections quantized as the module docstring says (``None``: as
    is); returns the same object. Raises :class:`~metagen.errors.InvalidParameterError` naming
    ``quantization`` for an unknown scheme, before touching the model."""
    check_quantization(quantization)
    if quantization is None:
        return model
    act8 = quantization == "w8a8"
    targets: list[tuple[nn.Module, str]] = [(layer, name) for layer in model.layers
                                            for name in PROJECTIONS]
    if model.lm_head is not None:
        targets.append((model, "lm_head"))
    arena = None
    if model.device.type == "cpu":  # q is (out, in): the float projection (in, out) turned
        arena = WeightArena([getattr(m, n).shape[::-1] for m, n in targets], torch.int8)
    for module, name in targets:
        _swap(module, name, act8, arena)
    return model
