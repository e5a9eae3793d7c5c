"""ModelConfig: the architecture facts the engine needs, read from a Hugging Face ``config.json``.

Supported: ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
``Qwen3ForCausalLM`` (q/k RMSNorm). Anything else raises :class:`ModelLoadError` naming the
architecture and pointing at ``metagen.HFGenerator``, which runs any transformers model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metagen.errors import ModelLoadError

SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_UNSUPPORTED_ROPE_REASONS = {
    "dynamic": "dynamic NTK (as transformers runs it) recomputes the frequencies of a whole "
               "forward pass once a sequence outgrows max_position_embeddings, so keys already "
               "in the KV cache were rotated with other frequencies; a paged engine cannot "
               "reproduce that",
}


@dataclass(slots=True, frozen=True)
class ModelConfig:
    """Decoder hyper-parameters. ``rope_scaling`` is the HF ``rope_parameters`` dict (or ``{}``)."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    sliding_window: int | None = None
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ModelLoadError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}")
        rope_type = self.rope_scaling.get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            reason = _UNSUPPORTED_ROPE_REASONS.get(rope_type, "")
            raise ModelLoadError(
                f"rope_type {rope_type!r} is not supported by the built-in engine (supported: "
                f"{', '.join(SUPPORTED_ROPE_TYPES)}{'; ' + reason if reason else ''}); use "
                "metagen.HFGenerator for this model")
        if rope_type == "yarn":
            for key in ("factor", "original_max_position_embeddings"):
                if self.rope_scaling.get(key) is None:
                    raise ModelLoadError(f"rope_type 'yarn' needs {key!r} in rope_parameters")

    @property
    def num_params(self) -> int:
        """Parameters of the matmuls run per token (layers + LM head; not the embedding lookup)."""
        h, d = self.hidden_size, self.head_dim
        attn = h * d * (self.num_heads * 2 + self.num_kv_heads * 2)
        mlp = 3 * h * self.intermediate_size
        return self.num_layers * (attn + mlp) + self.vocab_size * h

    def flops_per_token(self, context: int) -> float:
        """Forward FLOPs of one token attending over ``context`` tokens: 2 N + 4 L H d context."""
        return 2.0 * self.num_params + 4.0 * self.num_layers * self.num_heads * self.head_dim * context

    @staticmethod
    def from_dict(cfg: dict[str, Any]) -> ModelConfig:
        archs = cfg.get("architectures") or [cfg.get("model_type", "<unknown>")]
        arch = archs[0]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelLoadError(
                f"architecture {arch!r} is not supported by the built-in engine (supported: "
                f"{', '.join(SUPPORTED_ARCHITECTURES)}); use metagen.HFGenerator, which runs any "
                "transformers model")
        family = SUPPORTED_ARCHITECTURES[arch]
        if cfg.get("hidden_act", "silu") != "silu":
            raise ModelLoadError(f"hidden_act={cfg.get('hidden_act')!r} is not supported "
                                 "(only silu); use metagen.HFGenerator")
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        if "type" in rope and "rope_type" not in rope:
            rope["rope_type"] = rope.pop("type")
        theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
        if rope.get("rope_type") == "yarn":
            rope = _yarn_defaults(rope, cfg)
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
        return ModelConfig(
            architecture=arch,
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling=rope,
            max_position_embeddings=int(cfg.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=bool(cfg.get("attention_bias", family == "qwen2")),
            qk_norm=family == "qwen3",
            sliding_window=int(window) if window else None,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @staticmethod
    def from_folder(path: str | Path) -> ModelConfig:
        file = Path(path) / "config.json"
        if not file.is_file():
            raise ModelLoadError(f"{file} not found: a model folder needs config.json + *.safetensors")
        try:
            cfg = json.loads(file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"cannot read {file}: {exc}") from exc
        try:
            return ModelConfig.from_dict(cfg)
        except KeyError as exc:
            raise ModelLoadError(f"{file} lacks the field {exc}") from exc


def _yarn_defaults(rope: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """transformers' reading of a yarn dict: a top-level ``original_max_position_embeddings``
    wins, else it defaults to ``max_position_embeddings``; ``factor: null`` (DeepSeek style) means
    their ratio. A missing ``factor`` key stays missing (transformers rejects it too)."""
    rope = dict(rope)
    max_pos = int(cfg.get("max_position_embeddings", 2048))
    if cfg.get("original_max_position_embeddings") is not None:
        rope["original_max_position_embeddings"] = int(cfg["original_max_position_embeddings"])
    rope.setdefault("original_max_position_embeddings", max_pos)
    if "factor" in rope and rope["factor"] is None:
        rope["factor"] = max_pos / rope["original_max_position_embeddings"]
    return rope
