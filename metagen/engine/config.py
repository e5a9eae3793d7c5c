"""EngineConfig: every knob of the built-in engine, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError

DType = Literal["float32", "bfloat16", "float16"]


def _positive_int(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidParameterError(name, value, "must be a positive integer")


@dataclass(slots=True, frozen=True)
class EngineConfig:
    """Engine settings.

    Memory: the KV cache holds ``num_blocks`` blocks of ``block_size`` tokens; give either
    ``num_blocks`` or ``kv_cache_bytes`` (the budget for K and V of all layers; the cache is
    allocated once and never grows). With neither, ``kv_cache_bytes`` defaults to 64 MiB, capped
    at what ``max_num_seqs`` sequences of ``max_model_len`` tokens could use.
    Scheduling: at most ``max_num_seqs`` running sequences and ``max_num_batched_tokens`` tokens per
    forward step (long prompts are prefilled in chunks of that size).
    ``max_model_len`` (default: the model's ``max_position_embeddings``) bounds prompt + output.
    ``prefix_cache`` enables the radix prefix cache; ``hydragen`` the shared-prefix attention,
    used for groups sharing at least ``hydragen_min_prefix`` tokens (below that the fused plain
    kernel is faster on CPU: measured crossover ~100-300 tokens on a 4-layer, 256-wide model).
    ``device`` "auto" picks CUDA when available.
    """

    block_size: int = 16
    num_blocks: int | None = None
    kv_cache_bytes: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None
    prefix_cache: bool = True
    hydragen: bool = True
    hydragen_min_prefix: int = 192
    dtype: DType = "float32"
    device: str = "auto"

    def __post_init__(self) -> None:
        _positive_int("block_size", self.block_size)
        _positive_int("num_blocks", self.num_blocks, allow_none=True)
        _positive_int("kv_cache_bytes", self.kv_cache_bytes, allow_none=True)
        if self.num_blocks is not None and self.kv_cache_bytes is not None:
            raise InvalidParameterError("kv_cache_bytes", self.kv_cache_bytes,
                                        "give either num_blocks or kv_cache_bytes, not both")
        _positive_int("max_num_seqs", self.max_num_seqs)
        _positive_int("max_num_batched_tokens", self.max_num_batched_tokens)
        _positive_int("max_model_len", self.max_model_len, allow_none=True)
        if not isinstance(self.hydragen_min_prefix, int) or isinstance(
                self.hydragen_min_prefix, bool) or self.hydragen_min_prefix < 0:
            raise InvalidParameterError("hydragen_min_prefix", self.hydragen_min_prefix,
                                        "must be an integer >= 0")
        for name in ("prefix_cache", "hydragen"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidParameterError(name, getattr(self, name), "must be a bool")
        if self.dtype not in ("float32", "bfloat16", "float16"):
            raise InvalidParameterError("dtype", self.dtype,
                                        "must be 'float32', 'bfloat16' or 'float16'")
        if not isinstance(self.device, str) or not self.device:
            raise InvalidParameterError("device", self.device, "must be 'auto', 'cpu', 'cuda', ...")

    def torch_dtype(self):  # -> torch.dtype (torch imported lazily)
        import torch

        return {"float32": torch.float32, "bfloat16": torch.bfloat16,
                "float16": torch.float16}[self.dtype]

    def torch_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
