"""Rotary position embeddings (Su et al. 2021) with the common frequency scalings.

``inv_frequencies`` is a pure function of the config; the model precomputes cos/sin tables for
every position once. Layout is the "rotate half" one used by Hugging Face Llama/Qwen checkpoints.
Scalings: ``default``; ``linear`` (position interpolation, Chen et al. 2023); ``llama3``
(Llama 3.1's band-wise interpolation); ``yarn`` (Peng et al. 2023, "YaRN: Efficient Context
Window Extension of Large Language Models": NTK-by-parts interpolation plus a temperature on the
attention logits, applied by multiplying cos and sin by ``attention_scaling``).

The maths follows transformers' ``modeling_rope_utils`` so that checkpoints behave as there.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def inv_frequencies(head_dim: int, theta: float, scaling: dict[str, Any]) -> torch.Tensor:
    """(head_dim // 2,) float64 inverse frequencies after scaling (the cos/sin factor of YaRN
    is :func:`attention_scaling`). Raises ``ValueError`` for an unknown ``rope_type`` or a yarn
    dict without its keys."""
    return _scaled(head_dim, theta, scaling)


def _scaled(head_dim: int, theta: float, scaling: dict[str, Any]) -> torch.Tensor:
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
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
    if kind == "yarn":
        ramp = yarn_ramp(head_dim, theta, float(scaling["original_max_position_embeddings"]),
                         float(scaling.get("beta_fast") or 32), float(scaling.get("beta_slow") or 1),
                         bool(scaling.get("truncate", True)))
        # ramp 0: high-frequency dims keep their frequency (extrapolate); 1: interpolate by factor
        return inv * (1 - ramp) + (inv / factor) * ramp
    raise ValueError(f"unsupported rope_type {kind!r}")


def yarn_correction_dim(num_rotations: float, head_dim: int, theta: float,
                        original_max_positions: float) -> float:
    """The (fractional) dimension pair index whose wavelength fits ``num_rotations`` full turns
    into ``original_max_positions`` tokens (YaRN eq. 17, inverted for the dimension)."""
    turns = original_max_positions / (num_rotations * 2 * math.pi)
    return head_dim * math.log(turns) / (2 * math.log(theta))


def yarn_ramp(head_dim: int, theta: float, original_max_positions: float, beta_fast: float,
              beta_slow: float, truncate: bool = True) -> torch.Tensor:
    """(head_dim // 2,) float64 interpolation weight per frequency: 0 for the dims that turn more
    than ``beta_fast`` times within the original context, 1 for those turning fewer than
    ``beta_slow`` times, linear in the dimension index between (YaRN's "NTK-by-parts" ramp)."""
    low = yarn_correction_dim(beta_fast, head_dim, theta, original_max_positions)
    high = yarn_correction_dim(beta_slow, head_dim, theta, original_max_positions)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid a zero-width ramp, as transformers does
    index = torch.arange(head_dim // 2, dtype=torch.float64)
    return ((index - low) / (high - low)).clamp(0, 1)


def _mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def attention_scaling(scaling: dict[str, Any]) -> float:
    """The multiplier of cos and sin (so attention logits scale by its square): 1 except for yarn,
    where it is ``attention_factor`` if given, else ``mscale(factor, mscale) /
    mscale(factor, mscale_all_dim)`` when both are set (DeepSeek style), else
    ``0.1 ln(factor) + 1`` (YaRN eq. 22, as sqrt(1/t))."""
    if scaling.get("rope_type", "default") != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])
    mscale, all_dim = scaling.get("mscale"), scaling.get("mscale_all_dim")
    if mscale and all_dim:
        return _mscale(factor, float(mscale)) / _mscale(factor, float(all_dim))
    return _mscale(factor)


def rope_tables(inv: torch.Tensor, max_positions: int, dtype: torch.dtype,
                device: torch.device | str, attention_scale: float = 1.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables of shape (max_positions, head_dim), computed in float32 as HF does, both
    multiplied by ``attention_scale`` (:func:`attention_scaling` of the config)."""
    pos = torch.arange(max_positions, dtype=torch.float32)
    freqs = torch.outer(pos, inv.to(torch.float32))  # (P, D/2)
    emb = torch.cat([freqs, freqs], dim=-1)  # (P, D)
    cos, sin = emb.cos(), emb.sin()
    if attention_scale != 1.0:
        cos, sin = cos * attention_scale, sin * attention_scale
    return cos.to(dtype=dtype, device=device), sin.to(dtype=dtype, device=device)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (T, H, D) rotated by per-token cos/sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]
