"""The model interface of the engine: :class:`CausalLM` (what the runner, the engine, the loader
and the quantizer call on a model) and :class:`ModelFamily` (what the registry,
:mod:`metagen.engine.models.registry`, maps a Hugging Face architecture name to: a config
parser, a model class and the names of its weights).

A new decoder family plugs in by implementing :class:`CausalLM` (an ``nn.Module``), describing
its checkpoint with :class:`WeightNames` and adding a :class:`ModelFamily` to ``ARCHITECTURES``;
nothing else names a model class. The native decode step (:mod:`metagen.engine.native.
decode_step`) reads Llama-layout weights: a model offers it through :meth:`CausalLM.native_step`
(``None`` where it has none, and the runner then takes the PyTorch path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch
from torch import nn

if TYPE_CHECKING:
    from metagen.engine.attention import AttentionMetadata
    from metagen.engine.models.config import ModelConfig
    from metagen.engine.native.decode_step import DecodeStep, StepPlan

KVScales = tuple[torch.Tensor, torch.Tensor]  # an int8 cache's K and V scales


class CausalLM(Protocol):
    """A decoder over a paged KV cache (an ``nn.Module``; see
    :class:`~metagen.engine.models.llama.LlamaModel`). ``cfg`` holds the architecture facts
    the engine sizes its cache and FLOP counts with; ``max_positions`` is how many positions its
    RoPE tables cover (after :meth:`build_rope`)."""

    cfg: ModelConfig
    max_positions: int

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor,
                 k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                 kv_scales: KVScales | None = None) -> torch.Tensor:
        """input_ids, positions (T,) -> final hidden states (T, hidden); writes the tokens' K/V
        into the caches ((L, num_blocks, block_size, Hkv, D) each)."""
        ...

    def forward_native(self, input_ids: np.ndarray, step: DecodeStep, plan: StepPlan,
                       k_cache: torch.Tensor, v_cache: torch.Tensor,
                       kv_scales: KVScales | None = None,
                       out: tuple[torch.Tensor, np.ndarray] | None = None) -> torch.Tensor:
        """The forward of a few tokens through ``step`` (what :meth:`native_step` returned)."""
        ...

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (N, H) -> float32 logits (N, V)."""
        ...

    def native_step(self) -> DecodeStep | None:
        """The native decode step over this model's weights, or None where it cannot run (no
        native library, weights not float32 on the CPU, a layout it does not read)."""
        ...

    def head_weight(self) -> Any:
        """The LM head as an ``(hidden, V)`` weight (a tied embedding: a transposed copy)."""
        ...

    def projections(self) -> list[tuple[nn.Module, str]]:
        """Every linear projection of the decoder layers as ``(module, attribute)``, in layer
        order -- what quantization replaces (an ``(in, out)`` weight each)."""
        ...

    def untied_head(self) -> tuple[nn.Module, str] | None:
        """The LM head's ``(module, attribute)`` when it is its own weight, else None."""
        ...

    def build_rope(self) -> None:
        """Precompute the position tables (after the weights are on their device)."""
        ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def buffers(self, recurse: bool = True) -> Iterator[torch.Tensor]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True,
                        assign: bool = False) -> Any: ...

    def eval(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class WeightNames:
    """How a checkpoint's tensors (Hugging Face names, without ``model.``) become a model's
    state: ``shapes`` -- every tensor the model reads, with its stored ``(out, in)`` shape
    (checked before loading); ``projections`` -- state name -> the tensors concatenated, as
    ``(in, sum out)``, into that fused, transposed projection; ``tensors`` -- state name -> the
    tensors concatenated as they are (norms, biases, the embedding); ``embedding`` -- the
    name of the embedding table."""

    shapes: dict[str, tuple[int, ...]]
    projections: dict[str, tuple[str, ...]]
    tensors: dict[str, tuple[str, ...]]
    embedding: str


@dataclass(frozen=True, slots=True)
class ModelFamily:
    """One entry of the architecture table: ``parse_config(config.json dict, architecture)``
    -> :class:`ModelConfig` (raising ``ModelLoadError`` naming a bad field), ``model_class(cfg,
    max_positions)`` -> an empty :class:`CausalLM` (built on the meta device by the loader),
    ``weights(cfg)`` -> its :class:`WeightNames`."""

    name: str
    parse_config: Callable[[dict[str, Any], str], ModelConfig]
    model_class: Callable[[ModelConfig, int | None], CausalLM]
    weights: Callable[[ModelConfig], WeightNames]


__all__ = ["CausalLM", "KVScales", "ModelFamily", "WeightNames"]
