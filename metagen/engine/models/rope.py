"""Rotary position embeddings (Su et al. 2021) with the common frequency scalings.

``inv_frequencies`` is a pure function of the config; the model precomputes cos/sin tables for
every position once. Layout is the "rotate half" one used by Hugging Face Llama/Qwen checkpoints.
Scalings: ``default``; ``linear`` (position interpolation, Chen et al. 2023); ``llama3``
(Llama 3.1's band-wise interpolation).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def inv_frequencies(head_dim: int, theta: float, scaling: dict[str, Any]) -> torch.Tensor:
    """(head_dim // 2,) float64 inverse frequencies after scaling."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    kind = scaling.get("rope_type", "default")
    if kind == "default":
        return inv
    factor = float(scaling["factor"])
    if kind == "linear":
        return inv / factor
    if kind == "llama3":
        low = float(scaling.get("low_freq_factor", 1.0))
        high = float(scaling.get("high_freq_factor", 4.0))
        old_ctx = float(scaling.get("original_max_position_embeddings", 8192))
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > old_ctx / low, inv / factor, inv)
        smooth = (old_ctx / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_ctx / high) & (wavelen <= old_ctx / low)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"unsupported rope_type {kind!r}")


def rope_tables(inv: torch.Tensor, max_positions: int, dtype: torch.dtype,
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables of shape (max_positions, head_dim), computed in float32 as HF does."""
    pos = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(pos, inv.to(torch.float32))  # (P, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
    return emb.cos().to(dtype=dtype, device=device), emb.sin().to(dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (T, H, D) rotated by per-token cos/sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
