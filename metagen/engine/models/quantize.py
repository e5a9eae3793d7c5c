"""Quantize a loaded model's weights in place: ``quantization="int8"`` replaces every linear
projection (q|k|v, o, gate|up, down, and an untied LM head) by an
:class:`~metagen.engine.models.int8.Int8Weight` (int8, one float32 scale per output channel);
``"w8a8"`` by the same weights that also quantize their activations (``act8``); ``"int4"``
the four projections by :class:`~metagen.engine.models.int4.Int4Weight` (int4, a scale per
output channel and block of 32 inputs, int8 activations) and an untied LM head by w8a8's int8
(as llama.cpp's Q4_0 mix keeps its output matrix at higher precision: the head decides every
token); ``"int4-all"`` stores an untied LM head in int4 as well (as onnxruntime-genai's int4
models do: about half the head's w8a8 bytes to read per token). Embeddings, norms and biases stay
as loaded; a tied LM head is the embedding table and stays too (so on a tied model "int4-all"
stores what "int4" does). Works on any checkpoint
:func:`~metagen.engine.models.loader.load_model` loads, since it runs on the loaded model (its
:meth:`~metagen.engine.models.interface.CausalLM.projections` and untied head), one projection
at a time (the float copy of each is freed as it goes). On CPU the quantized weights share one
buffer on huge pages, as the loader's float ones do
(:class:`~metagen.engine.models.weight_arena.WeightArena`: decoding streams them all).
"""

from __future__ import annotations

import torch
from torch import nn

from metagen.engine.config import Quantization, check_quantization
from metagen.engine.models.int4 import Int4Weight
from metagen.engine.models.int8 import Int8Weight
from metagen.engine.models.interface import CausalLM
from metagen.engine.models.weight_arena import WeightArena
from metagen.engine.native.int4_matmul import packed_bytes


# Each scheme's storage: (the projections' kind, an untied LM head's kind); a kind is what
# _quantized makes: "int4", or "int8" / "w8a8".
_KINDS: dict[str, tuple[str, str]] = {"int8": ("int8", "int8"), "w8a8": ("w8a8", "w8a8"),
                                     "int4": ("int4", "w8a8"), "int4-all": ("int4", "int4")}


def _quantized(weight: torch.Tensor, kind: str) -> Int8Weight | Int4Weight:
    """``weight`` (in, out) as ``kind``: "int4", or "int8" / "w8a8"."""
    return Int4Weight.from_in_out(weight) if kind == "int4" else \
        Int8Weight.from_in_out(weight, act8=kind == "w8a8")


def _swap(module: nn.Module, name: str, quantized: Int8Weight | Int4Weight,
          arena: WeightArena | None) -> None:
    if arena is not None:
        if isinstance(quantized, Int4Weight):
            quantized.packed = arena.take(quantized.packed.shape).copy_(quantized.packed)
        else:
            quantized.q = arena.take(quantized.q.shape).view(torch.int8).copy_(quantized.q)
    delattr(module, name)  # a registered parameter cannot be reassigned a module
    setattr(module, name, quantized)


def quantization_of(model: CausalLM) -> Quantization | None:
    """How ``model``'s weights are stored: ``"int8"``, ``"w8a8"``, ``"int4"`` or ``"int4-all"``
    (int4 projections and an int4 untied head) once :func:`quantize_model` ran on it, else
    ``None`` (as loaded). A tied model quantized "int4-all" reads as "int4" (the same storage:
    see :func:`stores`)."""
    module, name = model.projections()[0]
    qkv = getattr(module, name)
    if isinstance(qkv, Int4Weight):
        head = model.untied_head()
        return "int4-all" if head is not None and isinstance(getattr(*head), Int4Weight) \
            else "int4"
    return None if not isinstance(qkv, Int8Weight) else "w8a8" if qkv.act8 else "int8"


def stores(model: CausalLM, quantization: Quantization | None) -> bool:
    """Whether ``model``'s weights are stored as :func:`quantize_model` with ``quantization``
    stores them: :func:`quantization_of` is ``quantization``, or "int4" on a tied model asked
    for "int4-all" (its head is the embedding table, kept as loaded by both)."""
    have = quantization_of(model)
    return have == quantization or (quantization == "int4-all" and have == "int4"
                                    and model.untied_head() is None)


def quantize_model(model: CausalLM, quantization: Quantization | None) -> CausalLM:
    """``model`` with its projections quantized as the module docstring says (``None``: as
    is); returns the same object. Raises :class:`~metagen.errors.InvalidParameterError` naming
    ``quantization`` for an unknown scheme, before touching the model."""
    check_quantization(quantization)
    if quantization is None:
        return model
    layers, head_kind = _KINDS[quantization]
    targets: list[tuple[nn.Module, str, str]] = [(module, name, layers)
                                                 for module, name in model.projections()]
    head = model.untied_head()
    if head is not None:
        targets.append((*head, head_kind))
    arena = None
    if model.device.type == "cpu":
        arena = WeightArena([_stored_shape(getattr(m, n).shape, kind)
                             for m, n, kind in targets], torch.uint8)
    for module, name, kind in targets:  # one at a time: each float copy is freed as it goes
        _swap(module, name, _quantized(getattr(module, name), kind), arena)
    return model


def _stored_shape(shape: torch.Size, kind: str) -> tuple[int, ...]:
    """The shape of the buffer a float (in, out) projection becomes as ``kind``: int8's q
    (out, in), or int4's packed bytes."""
    k, n = shape
    return (packed_bytes(n, k),) if kind == "int4" else (n, k)
