"""ModelConfig: the architecture facts the engine needs, read from a Hugging Face ``config.json``.

Which architectures are supported is the table of :mod:`metagen.engine.models.registry`
(``ARCHITECTURES``: today ``LlamaForCausalLM``, ``MistralForCausalLM``, ``Qwen2ForCausalLM``,
``Qwen3ForCausalLM``); :meth:`ModelConfig.from_dict` hands ``config.json`` to the parser of its
architecture's family (:func:`llama_config` for all four). Anything else raises
:class:`UnsupportedArchitectureError` naming the architecture, listing the table and pointing at
``metagen.HFGenerator``, which runs any transformers model.

Every field is checked before anything is allocated: sizes must be positive JSON integers (a float
such as ``64.0`` or ``1e9`` is refused where an integer belongs), rates positive finite numbers,
and the head counts must fit together. A value the engine cannot use raises
:class:`ModelLoadError` naming the field (and, from :meth:`ModelConfig.from_folder`, the file).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metagen.errors import ModelLoadError, UnsupportedArchitectureError

SUPPORTED_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
_SCALED_ROPE_TYPES = ("linear", "llama3", "yarn")  # those that read rope_parameters["factor"]
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
        """Raise :class:`ModelLoadError` naming the field for sizes that cannot fit together
        (:class:`UnsupportedArchitectureError` for a rope type the engine lacks)."""
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ModelLoadError(f"{name}={value!r} must be a positive integer")
        if self.num_heads % self.num_kv_heads:
            raise ModelLoadError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}")
        if self.head_dim % 2:
            raise ModelLoadError(f"head_dim={self.head_dim} must be even (RoPE rotates pairs)")
        rope_type = self.rope_scaling.get("rope_type", "default")
        if rope_type not in SUPPORTED_ROPE_TYPES:
            reason = _UNSUPPORTED_ROPE_REASONS.get(rope_type, "")
            raise UnsupportedArchitectureError(
                f"rope_type {rope_type!r} is not supported by the built-in engine (supported: "
                f"{', '.join(SUPPORTED_ROPE_TYPES)}{'; ' + reason if reason else ''}); use "
                "metagen.HFGenerator for this model")
        if rope_type == "yarn":
            for key in ("factor", "original_max_position_embeddings"):
                if self.rope_scaling.get(key) is None:
                    raise ModelLoadError(f"rope_type 'yarn' needs {key!r} in rope_parameters")
        if rope_type in _SCALED_ROPE_TYPES:
            _positive_number(self.rope_scaling, "factor", f"rope_parameters ({rope_type})")

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
        """Read a Hugging Face config dict. Raises :class:`UnsupportedArchitectureError` for an
        architecture, activation or rope type the engine lacks, and :class:`ModelLoadError`
        naming the field for a missing, mistyped or impossible value."""
        if not isinstance(cfg, dict):
            raise ModelLoadError(f"the config must be a JSON object, not {type(cfg).__name__}")
        from metagen.engine.models.registry import family_of  # the table imports the models

        arch = architecture_name(cfg)
        return family_of(arch).parse_config(cfg, arch)

    @staticmethod
    def from_folder(path: str | Path) -> ModelConfig:
        """Read ``path/config.json``; every error is one line naming the file (and the field)."""
        file = Path(path) / "config.json"
        if not file.is_file():
            raise ModelLoadError(f"{file} not found: a model folder needs config.json + *.safetensors")
        try:
            cfg = json.loads(file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelLoadError(f"cannot read {file}: {exc}") from exc
        try:
            return ModelConfig.from_dict(cfg)
        except ModelLoadError as exc:
            raise type(exc)(f"{file}: {exc}") from exc


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_REQUIRED: Any = object()


def _int_field(cfg: dict[str, Any], key: str, default: Any = _REQUIRED, *, minimum: int = 1
               ) -> Any:
    """``cfg[key]`` as an integer >= ``minimum``; ``default`` when absent or null (a required
    field has none). A float (``64.0``, ``1e9``), a bool or a string is refused."""
    value = cfg.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ModelLoadError(f"the field {key!r} is missing")
        return default
    if not _is_int(value) or value < minimum:
        kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise ModelLoadError(f"{key}={value!r} must be {kind}")
    return value


def _positive_number(cfg: dict[str, Any], key: str, where: str | None = None,
                     default: Any = _REQUIRED) -> Any:
    """``cfg[key]`` as a finite float > 0 (``default`` when absent or null); ``where`` names
    a nested dict in messages."""
    value = cfg.get(key)
    inside = f" in {where}" if where else ""
    if value is None:
        if default is _REQUIRED:
            raise ModelLoadError(f"the field {key!r} is missing{inside}")
        return default
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (
            math.isfinite(value) and value > 0):
        raise ModelLoadError(f"{key}={value!r}{inside} must be a finite number > 0")
    return float(value)


def _bool_field(cfg: dict[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelLoadError(f"{key}={value!r} must be true or false")
    return value


def _token_ids(cfg: dict[str, Any], key: str) -> tuple[int, ...]:
    """A token id or list of them (null: none), each an integer >= 0."""
    value = cfg.get(key)
    ids = [] if value is None else value if isinstance(value, list) else [value]
    if not all(_is_int(t) and t >= 0 for t in ids):
        raise ModelLoadError(f"{key}={value!r} must be a token id or a list of token ids")
    return tuple(ids)


def architecture_name(cfg: dict[str, Any]) -> str:
    """The architecture named by ``architectures[0]`` (or ``model_type``), not yet looked up."""
    archs = cfg.get("architectures") or [cfg.get("model_type", "<unknown>")]
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise ModelLoadError(f"architectures={archs!r} must be a list of class names")
    return archs[0]


def _rope_parameters(cfg: dict[str, Any]) -> dict[str, Any]:
    """The rope dict (``rope_parameters``, or the older ``rope_scaling``), with ``type`` renamed
    ``rope_type`` and transformers' yarn defaults filled in."""
    raw = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    if not isinstance(raw, dict):
        raise ModelLoadError(f"rope_parameters={raw!r} must be a JSON object")
    rope = dict(raw)
    if "type" in rope and "rope_type" not in rope:
        rope["rope_type"] = rope.pop("type")
    if rope.get("rope_type") == "yarn":
        rope = _yarn_defaults(rope, cfg)
    return rope


def _yarn_defaults(rope: dict[str, Any], cfg: dict[str, Any]) -> dict[str, Any]:
    """transformers' reading of a yarn dict: a top-level ``original_max_position_embeddings``
    wins, else it defaults to ``max_position_embeddings``; ``factor: null`` (DeepSeek style) means
    their ratio. A missing ``factor`` key stays missing (transformers rejects it too)."""
    rope = dict(rope)
    max_pos = _int_field(cfg, "max_position_embeddings", 2048)
    top_level = _int_field(cfg, "original_max_position_embeddings", None)
    if top_level is not None:
        rope["original_max_position_embeddings"] = top_level
    rope.setdefault("original_max_position_embeddings", max_pos)
    if "factor" in rope and rope["factor"] is None:
        rope["factor"] = max_pos / rope["original_max_position_embeddings"]
    return rope


def llama_config(cfg: dict[str, Any], arch: str, variant: str) -> ModelConfig:
    """The :class:`ModelConfig` of a Llama-family ``config.json`` (``variant``: ``"llama"``,
    ``"mistral"``, ``"qwen2"`` -- q/k/v bias by default -- or ``"qwen3"`` -- RMSNorm on q and
    k). Raises :class:`UnsupportedArchitectureError` for an activation other than SiLU or a rope
    type the engine lacks, :class:`ModelLoadError` naming a missing, mistyped or impossible
    field."""
    if cfg.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(f"hidden_act={cfg.get('hidden_act')!r} is not "
                                           "supported (only silu); use metagen.HFGenerator")
    heads = _int_field(cfg, "num_attention_heads")
    hidden = _int_field(cfg, "hidden_size")
    head_dim = _int_field(cfg, "head_dim", None)
    if head_dim is None:
        if hidden % heads:
            raise ModelLoadError(f"hidden_size={hidden} is not a multiple of "
                                 f"num_attention_heads={heads} (and no head_dim is given)")
        head_dim = hidden // heads
    rope = _rope_parameters(cfg)
    theta = _positive_number(rope, "rope_theta", "rope_parameters", None)
    if theta is None:
        theta = _positive_number(cfg, "rope_theta", None, 10000.0)
    window = _int_field(cfg, "sliding_window", None, minimum=0)
    return ModelConfig(
        architecture=arch,
        vocab_size=_int_field(cfg, "vocab_size"),
        hidden_size=hidden,
        intermediate_size=_int_field(cfg, "intermediate_size"),
        num_layers=_int_field(cfg, "num_hidden_layers"),
        num_heads=heads,
        num_kv_heads=_int_field(cfg, "num_key_value_heads", heads),
        head_dim=head_dim,
        rms_norm_eps=_positive_number(cfg, "rms_norm_eps", None, 1e-6),
        rope_theta=theta,
        rope_scaling=rope,
        max_position_embeddings=_int_field(cfg, "max_position_embeddings", 2048),
        tie_word_embeddings=_bool_field(cfg, "tie_word_embeddings", False),
        attention_bias=_bool_field(cfg, "attention_bias", variant == "qwen2"),
        qk_norm=variant == "qwen3",
        sliding_window=(window or None) if _bool_field(cfg, "use_sliding_window", True)
        else None,
        bos_token_id=_int_field(cfg, "bos_token_id", None, minimum=0),
        eos_token_ids=_token_ids(cfg, "eos_token_id"),
    )
