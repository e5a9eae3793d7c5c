"""Llama-family decoder forward over a flat batch of tokens with a paged KV cache.

One forward call runs T tokens that belong to any number of sequences (prefill chunks and decode
steps mixed); which token attends to what is described by the runner's
:class:`~metagen.engine.attention.AttentionMetadata`. Weights are stored fused (q|k|v and
gate|up) so a layer is four matmuls, and every projection is stored transposed, ``(in, out)``,
and applied as ``x @ W``: on CPU, MKL streams that layout at 10.9 GB/s for one row against 8.5 for
``F.linear`` over ``(out, in)``. From 2 to 16 rows, where MKL repacks the weight on
every call, metagen's own kernel does the product instead, on torch's threads (table in
``benchmarks/README.md``).
Covers Llama 2/3, Mistral (full attention), Qwen2/2.5 (q/k/v bias) and Qwen3 (RMSNorm on q and k
per head). :class:`LlamaModel` implements :class:`~metagen.engine.models.interface.CausalLM`;
the architecture table (:mod:`metagen.engine.models.registry`) is the only other module that
names it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from metagen.engine.attention import AttentionMetadata, paged_attention
from metagen.engine.models.int4 import Int4Weight
from metagen.engine.models.int8 import Int8Weight
from metagen.engine.models.config import ModelConfig
from metagen.engine.models.rope import apply_rope, attention_scaling, inv_frequencies, rope_tables
from metagen.engine.native import load_small_matmul
from metagen.engine.native.decode_step import DecodeStep, StepPlan, for_model
from metagen.engine.native.threads import torch_ops_inline


Weight = torch.Tensor | Int8Weight | Int4Weight  # float (in, out), or quantized to int8 / int4
PROJECTIONS = ("qkv", "o", "gate_up", "down")  # a layer's linear projections (fused)


def project(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None
            ) -> torch.Tensor:
    """x (T, in) @ weight (in, out) [+ bias (out,)] -> (T, out). A few rows on the CPU go to
    metagen's native kernel (:mod:`metagen.engine.native.small_matmul`), the rest to torch; an
    quantized weight applies itself (:meth:`Int8Weight.apply_to`, :meth:`Int4Weight.apply_to`)."""
    if isinstance(weight, (Int8Weight, Int4Weight)):
        return weight.apply_to(x, bias)
    kernel = load_small_matmul()
    if kernel is not None and kernel.applies(x, weight, bias):
        return kernel(x, weight, bias)
    return torch.mm(x, weight) if bias is None else torch.addmm(bias, x, weight)


def on_native_pool(x: torch.Tensor, weight: Weight, bias: torch.Tensor | None = None) -> bool:
    """Whether :func:`project` (x, weight, bias) runs a native kernel (on the native pool's
    threads) rather than a torch product."""
    if isinstance(weight, (Int8Weight, Int4Weight)):
        return weight.native_kernel(x, bias) is not None
    kernel = load_small_matmul()
    return kernel is not None and kernel.applies(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019) computed in float32, as Hugging Face Llama does: the
    normalised activations are cast back to the input dtype before the weight multiplies them."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:  # one fused call, same math
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)


class DecoderLayer(nn.Module):
    """One pre-norm transformer block with fused projections."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        qkv_out = (cfg.num_heads + 2 * cfg.num_kv_heads) * d
        self.input_norm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.qkv: Weight = nn.Parameter(torch.empty(h, qkv_out),  # (in, out)
                                        requires_grad=False)
        self.qkv_bias = (nn.Parameter(torch.zeros(qkv_out), requires_grad=False)
                         if cfg.attention_bias else None)
        self.q_norm = nn.Parameter(torch.ones(d), requires_grad=False) if cfg.qk_norm else None
        self.k_norm = nn.Parameter(torch.ones(d), requires_grad=False) if cfg.qk_norm else None
        self.o: Weight = nn.Parameter(torch.empty(cfg.num_heads * d, h), requires_grad=False)
        self.post_norm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.gate_up: Weight = nn.Parameter(torch.empty(h, 2 * cfg.intermediate_size),
                                            requires_grad=False)
        self.down: Weight = nn.Parameter(torch.empty(cfg.intermediate_size, h), requires_grad=False)
        self.cfg = cfg
        self.scale = d ** -0.5

    def forward(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        cfg = self.cfg
        t, d = h.shape[0], cfg.head_dim
        x = rms_norm(h, self.input_norm, cfg.rms_norm_eps)
        qkv = project(x, self.qkv, self.qkv_bias)  # (T, (Hq + 2 Hkv) D)
        nq, nkv = cfg.num_heads * d, cfg.num_kv_heads * d
        qk = qkv[:, :nq + nkv].view(t, cfg.num_heads + cfg.num_kv_heads, d)
        v = qkv[:, nq + nkv:].reshape(t, cfg.num_kv_heads, d)
        if self.q_norm is not None and self.k_norm is not None:
            qk = torch.cat([rms_norm(qk[:, :cfg.num_heads], self.q_norm, cfg.rms_norm_eps),
                            rms_norm(qk[:, cfg.num_heads:], self.k_norm, cfg.rms_norm_eps)], 1)
        qk = apply_rope(qk, cos, sin)  # q and k heads rotated together
        q, k = qk[:, :cfg.num_heads], qk[:, cfg.num_heads:]
        attn = paged_attention(q, k, v, k_cache, v_cache, meta, self.scale,
                               kv_scales)  # (T, Hq, D)
        h = h + project(attn.reshape(t, nq), self.o)
        x = rms_norm(h, self.post_norm, cfg.rms_norm_eps)
        gate, up = project(x, self.gate_up).chunk(2, dim=-1)
        return h + project(F.silu(gate) * up, self.down)


class LlamaModel(nn.Module):
    """Embedding, decoder layers, final norm and LM head (tied or not)."""

    def __init__(self, cfg: ModelConfig, max_positions: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size), requires_grad=False)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size), requires_grad=False)
        self.lm_head: Weight | None = (None if cfg.tie_word_embeddings else
                        nn.Parameter(torch.empty(cfg.hidden_size, cfg.vocab_size),
                                     requires_grad=False))  # (in, out) like the projections
        self.max_positions = max_positions or cfg.max_position_embeddings
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None

    def build_rope(self) -> None:
        """Precompute cos/sin for positions ``0 .. max_positions - 1``, the most this model runs
        (call after moving to the final device/dtype). ``max_positions`` is the constructor's
        argument when given (the engine passes what its KV cache can use), else the config's
        ``max_position_embeddings``: the tables hold ``2 * max_positions * head_dim`` values."""
        inv = inv_frequencies(self.cfg.head_dim, self.cfg.rope_theta, self.cfg.rope_scaling)
        self.cos, self.sin = rope_tables(inv, self.max_positions, self.embed.dtype,
                                         self.embed.device,
                                         attention_scale=attention_scaling(self.cfg.rope_scaling))

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, k_cache: torch.Tensor,
                v_cache: torch.Tensor, meta: AttentionMetadata,
                kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """input_ids, positions (T,) -> final hidden states (T, hidden). Writes K/V into the cache
        (k_cache/v_cache: (L, num_blocks, block_size, Hkv, D); for an int8 cache, ``kv_scales``
        are its K and V scales (L, num_blocks, Hkv))."""
        assert self.cos is not None and self.sin is not None, "call build_rope() first"
        cos = self.cos.index_select(0, positions)  # (T, D)
        sin = self.sin.index_select(0, positions)
        h = self.embed.index_select(0, input_ids)  # (T, H)
        first = self.layers[0]
        assert isinstance(first, DecoderLayer)
        if not on_native_pool(h, first.qkv, first.qkv_bias):
            return self._layers(h, cos, sin, k_cache, v_cache, meta, kv_scales)
        with torch_ops_inline():  # no OpenMP worker left spinning beside the pool's products
            return self._layers(h, cos, sin, k_cache, v_cache, meta, kv_scales)

    def _layers(self, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMetadata,
                kv_scales: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            scales = None if kv_scales is None else (kv_scales[0][i], kv_scales[1][i])
            h = layer(h, cos, sin, k_cache[i], v_cache[i], meta, scales)
        return rms_norm(h, self.norm, self.cfg.rms_norm_eps)

    def forward_native(self, input_ids: np.ndarray, step: DecodeStep, plan: StepPlan,
                       k_cache: torch.Tensor, v_cache: torch.Tensor,
                       kv_scales: tuple[torch.Tensor, torch.Tensor] | None = None,
                       out: tuple[torch.Tensor, np.ndarray] | None = None) -> torch.Tensor:
        """:meth:`forward` for a step of a few tokens through the native decode step (see
        :mod:`metagen.engine.native.decode_step`; a CPU model): input_ids (T,) int64 NumPy ->
        final hidden states (T, hidden); positions and attention come from ``plan``;
        ``kv_scales`` as in :meth:`forward`. ``out``: a contiguous (T, hidden) float32 tensor
        and its NumPy view to hold the result (returned), else a new one. Raises ``IndexError``
        for an id outside the vocabulary."""
        # (T, H), updated in place; NumPy's gather dispatches no torch operator
        if out is None:
            h = torch.from_numpy(step.embedding.take(input_ids, axis=0))
        else:
            h = out[0]
            step.embedding.take(input_ids, axis=0, out=out[1])
        step(h, plan, k_cache, v_cache, scales=kv_scales)  # the final norm included
        return h

    def native_step(self) -> DecodeStep | None:
        """The native decode step over these (Llama-layout) weights: see
        :func:`metagen.engine.native.decode_step.for_model`."""
        return for_model(self)

    def head_weight(self) -> Weight:
        """The LM head ``(hidden, V)``: the untied head, or a transposed copy of the embedding."""
        return self.embed.t().contiguous() if self.lm_head is None else self.lm_head

    def projections(self) -> list[tuple[nn.Module, str]]:
        """Each layer's q|k|v, o, gate|up and down, in layer order."""
        return [(layer, name) for layer in self.layers for name in PROJECTIONS]

    def untied_head(self) -> tuple[nn.Module, str] | None:
        return None if self.lm_head is None else (self, "lm_head")

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (N, H) -> float32 logits (N, V)."""
        if self.lm_head is None:  # tied: the (V, H) embedding table is the head
            out = F.linear(hidden, self.embed)
        else:
            out = project(hidden, self.lm_head)
        return out if out.dtype == torch.float32 else out.float()  # no dispatch when it is
