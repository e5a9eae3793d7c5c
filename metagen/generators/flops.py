"""FLOP estimates for a decoder-only transformer (Kaplan et al. 2020, "Scaling Laws", sec. 2.1).

A forward pass over one token at position ``p`` (0-based; it attends to ``p + 1`` positions)
costs about ``2 * N + 4 * L * d_attn * (p + 1)`` FLOPs, with ``N`` the weight-matrix parameters (not the
input embedding lookup, norms or biases; a tied output head counts once -- the engine's count),
``L`` the layers and ``d_attn`` the attention width (heads x head dim): the first term is the
matmuls, the second QK^T and attention x V.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metagen.errors import InvalidParameterError


@dataclass(slots=True, frozen=True)
class FlopModel:
    """What the estimate needs from a model: matmul parameters, layers, attention width."""

    matmul_params: int
    layers: int
    attn_dim: int

    def __post_init__(self) -> None:
        for name in ("matmul_params", "layers", "attn_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise InvalidParameterError(name, value, "must be a non-negative integer")

    def forward(self, start: int, count: int) -> float:
        """FLOPs to run ``count`` tokens at positions ``start .. start + count - 1``."""
        if count <= 0:
            return 0.0
        # sum of (p + 1) for p in [start, start + count)
        attended = count * start + count * (count + 1) // 2
        return 2.0 * self.matmul_params * count + 4.0 * self.layers * self.attn_dim * attended

    def sequence(self, prompt_tokens: int, generated_tokens: int) -> float:
        """Prefill of a prompt then decoding of ``generated_tokens`` tokens after it, without
        a prefix cache. The last generated token is never fed back, so it costs nothing."""
        fed_back = max(generated_tokens - 1, 0)
        return self.forward(0, prompt_tokens) + self.forward(prompt_tokens, fed_back)


def flop_model_of(model: Any) -> FlopModel:
    """A :class:`FlopModel` for a ``transformers`` causal LM (reads ``model.config``)."""
    params = {id(p): p.numel() for p in model.parameters() if p.dim() >= 2}  # weight matrices
    total = sum(params.values())
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    if embed is not None and head is not None and embed.weight is not head.weight:
        total -= embed.weight.numel()  # an untied lookup table does no matmul
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") \
        else model.config
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    head_dim = getattr(config, "head_dim", None) or (
        int(config.hidden_size) // heads if heads else 0)
    return FlopModel(matmul_params=int(total), layers=int(config.num_hidden_layers),
                     attn_dim=int(heads * head_dim))
