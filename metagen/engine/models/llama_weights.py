"""The checkpoint of a Llama-family model (Llama 2/3, Mistral, Qwen2/2.5, Qwen3) by Hugging Face
tensor name: what :class:`~metagen.engine.models.llama.LlamaModel` reads and how the loader
turns it into the model's state (q/k/v and gate/up fused, every projection ``(in, out)``)."""

from __future__ import annotations

from metagen.engine.models.config import ModelConfig
from metagen.engine.models.interface import WeightNames


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight the model of ``cfg`` reads, by its Hugging Face name (without ``model.``),
    with its stored ``(out, in)`` shape."""
    h, d, inter = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    q, kv = cfg.num_heads * d, cfg.num_kv_heads * d
    shapes: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (cfg.vocab_size, h),
                                          "norm.weight": (h,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (cfg.vocab_size, h)
    for i in range(cfg.num_layers):
        a, m = f"layers.{i}.self_attn.", f"layers.{i}.mlp."
        shapes.update({a + "q_proj.weight": (q, h), a + "k_proj.weight": (kv, h),
                       a + "v_proj.weight": (kv, h), a + "o_proj.weight": (h, q),
                       f"layers.{i}.input_layernorm.weight": (h,),
                       f"layers.{i}.post_attention_layernorm.weight": (h,),
                       m + "gate_proj.weight": (inter, h), m + "up_proj.weight": (inter, h),
                       m + "down_proj.weight": (h, inter)})
        if cfg.attention_bias:
            shapes.update({a + "q_proj.bias": (q,), a + "k_proj.bias": (kv,),
                           a + "v_proj.bias": (kv,)})
        if cfg.qk_norm:
            shapes.update({a + "q_norm.weight": (d,), a + "k_norm.weight": (d,)})
    return shapes


def projection_names(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """Each fused projection's state name -> the Hugging Face weights it concatenates, in the
    order the loader builds them."""
    names: dict[str, tuple[str, ...]] = {}
    if not cfg.tie_word_embeddings:
        names["lm_head"] = ("lm_head.weight",)
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        a = p + "self_attn."
        names[p + "qkv"] = (a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight")
        names[p + "o"] = (a + "o_proj.weight",)
        names[p + "gate_up"] = (p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")
        names[p + "down"] = (p + "mlp.down_proj.weight",)
    return names


def tensor_names(cfg: ModelConfig) -> dict[str, tuple[str, ...]]:
    """Each other state tensor (embedding, norms, q/k/v bias) -> the weights it concatenates."""
    names: dict[str, tuple[str, ...]] = {"embed": ("embed_tokens.weight",),
                                         "norm": ("norm.weight",)}
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        a = p + "self_attn."
        if cfg.attention_bias:
            names[p + "qkv_bias"] = (a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias")
        if cfg.qk_norm:
            names[p + "q_norm"] = (a + "q_norm.weight",)
            names[p + "k_norm"] = (a + "k_norm.weight",)
        names[p + "input_norm"] = (p + "input_layernorm.weight",)
        names[p + "post_norm"] = (p + "post_attention_layernorm.weight",)
    return names


def llama_weights(cfg: ModelConfig) -> WeightNames:
    """The :class:`WeightNames` of a Llama-family checkpoint of ``cfg``."""
    return WeightNames(shapes=expected_shapes(cfg), projections=projection_names(cfg),
                       tensors=tensor_names(cfg), embedding="embed_tokens.weight")
