"""Deterministic benchmark models: random-weight Llamas saved in Hugging Face format.

``target`` (hidden 512, 8 layers, 8 heads, ffn 1376, vocab 32000, fp32, ~58M parameters) and
``draft`` (hidden 256, 2 layers) are plain seeded random inits. ``good_target`` is built around the
draft so that the draft predicts its greedy tokens most of the time: the draft's weights sit in the
target's first dimensions (heads 0-3, the first half of the MLP, the first 256 hidden units, with
RMSNorm weights divided by sqrt(2) to undo the wider norm), the remaining entries and the target's
extra layers are random and scaled by ``perturb``. ``perturb`` sets the agreement (~80% at the
default; the benchmark measures and reports it). ``--quick`` uses tiny sizes of the same shapes.

Models are written once per size to a cache folder and reused; nothing is downloaded.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from metagen.engine.models.interface import CausalLM


def models_dir(cache_dir: str | Path | None = None) -> Path:
    """Where the benchmarks' models are written once and reused: ``cache_dir``, else
    ``METAGEN_BENCH_CACHE``, else a folder in the system's temporary directory."""
    return Path(cache_dir or os.environ.get("METAGEN_BENCH_CACHE")
                or Path(tempfile.gettempdir()) / "metagen-bench-models")


@dataclass(slots=True, frozen=True)
class Sizes:
    """Shapes of the benchmark's target and draft (draft: half the width, fewer layers)."""

    hidden: int = 512
    layers: int = 8
    heads: int = 8
    ffn: int = 1376
    vocab: int = 32000
    draft_hidden: int = 256
    draft_layers: int = 2
    max_positions: int = 2048

    @property
    def tag(self) -> str:
        return (f"h{self.hidden}l{self.layers}a{self.heads}f{self.ffn}v{self.vocab}"
                f"-d{self.draft_hidden}l{self.draft_layers}")


FULL = Sizes()
QUICK = Sizes(hidden=64, layers=2, heads=4, ffn=172, vocab=512, draft_hidden=32, draft_layers=1,
              max_positions=1024)


def _config(hidden: int, layers: int, heads: int, ffn: int, vocab: int, max_pos: int):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                       num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=heads, max_position_embeddings=max_pos,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def _random_model(cfg, seed: int):
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # a larger init than HF's 0.02 gives peakier, less tie-prone logits
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]))
    return model


def _embed_draft(target, draft, perturb: float, seed: int) -> None:
    """Write ``draft`` into ``target``'s first dimensions; scale everything else by ``perturb``."""
    gen = torch.Generator().manual_seed(seed)
    dh = draft.config.hidden_size
    dff = draft.config.intermediate_size
    dhd = dh // draft.config.num_attention_heads  # draft head dim == target head dim
    with torch.no_grad():
        for name, p in target.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[1]), generator=gen).mul_(perturb)
        t, d = target.model, draft.model
        t.embed_tokens.weight[:, :dh] = d.embed_tokens.weight
        target.lm_head.weight[:, :dh] = draft.lm_head.weight
        t.norm.weight[:dh] = d.norm.weight / math.sqrt(2.0)
        t.norm.weight[dh:] = 1.0 / math.sqrt(2.0)
        for tl, dl in zip(t.layers, d.layers):
            for norm in ("input_layernorm", "post_attention_layernorm"):
                getattr(tl, norm).weight[:dh] = getattr(dl, norm).weight / math.sqrt(2.0)
            nq = draft.config.num_attention_heads * dhd
            for proj in ("q_proj", "k_proj", "v_proj"):
                getattr(tl.self_attn, proj).weight[:nq, :dh] = getattr(dl.self_attn, proj).weight
            tl.self_attn.o_proj.weight[:dh, :nq] = dl.self_attn.o_proj.weight
            tl.mlp.gate_proj.weight[:dff, :dh] = dl.mlp.gate_proj.weight
            tl.mlp.up_proj.weight[:dff, :dh] = dl.mlp.up_proj.weight
            tl.mlp.down_proj.weight[:dh, :dff] = dl.mlp.down_proj.weight
        for tl in t.layers[len(d.layers):]:  # extra layers: small residual updates only
            tl.self_attn.o_proj.weight.mul_(perturb)
            tl.mlp.down_proj.weight.mul_(perturb)


def build_models(cache_dir: str | Path, sizes: Sizes = FULL, perturb: float = 0.08,
                 seed: int = 0) -> dict[str, Path]:
    """Write (once) and return the folders of ``target``, ``draft`` and ``good_target``."""
    root = Path(cache_dir) / f"{sizes.tag}-p{perturb}-s{seed}"
    paths = {name: root / name for name in ("target", "draft", "good_target")}
    if all((p / "config.json").exists() for p in paths.values()):
        return paths
    s = sizes
    head_dim = s.hidden // s.heads
    target_cfg = _config(s.hidden, s.layers, s.heads, s.ffn, s.vocab, s.max_positions)
    draft_cfg = _config(s.draft_hidden, s.draft_layers, s.draft_hidden // head_dim,
                        s.ffn * s.draft_hidden // s.hidden, s.vocab, s.max_positions)
    target = _random_model(target_cfg, seed)
    draft = _random_model(draft_cfg, seed + 1)
    good = _random_model(target_cfg, seed + 2)
    _embed_draft(good, draft, perturb, seed + 3)
    for name, model in (("target", target), ("draft", draft), ("good_target", good)):
        model.save_pretrained(paths[name])
    return paths


_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def _tensors(path: str | Path) -> Iterator[tuple[str, int, int]]:
    """(name, elements, bytes per element) of every tensor stored in a saved model folder."""
    from safetensors import safe_open

    for f in Path(path).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():  # noqa: SIM118 (safe_open is not a mapping)
                sl = st.get_slice(key)
                yield key, math.prod(sl.get_shape()), _DTYPE_BYTES[sl.get_dtype()]


def param_count(path: str | Path) -> int:
    """Parameters stored in a saved model folder (embedding and LM head included)."""
    return sum(n for _, n, _ in _tensors(path))


def decode_read_bytes(path: str | Path) -> int:
    """Bytes of weights a batch-1 decode step streams: every tensor but the input embedding
    table, of which it reads one row (negligible). With untied embeddings (as here) that table
    is ~28 % of the target's parameters, so counting it would understate the roofline."""
    return sum(n * b for key, n, b in _tensors(path) if not key.endswith("embed_tokens.weight"))


def quantized_decode_read_bytes(path: str | Path, quantization: str) -> int:
    """:func:`decode_read_bytes` of the model as metagen holds it with ``quantization``
    (:func:`held_decode_read_bytes` of the loaded model)."""
    from metagen.engine.models.loader import load_model

    return held_decode_read_bytes(load_model(path, quantization=quantization))  # type: ignore[arg-type]


def held_decode_read_bytes(model: CausalLM) -> int:
    """The bytes a batch-1 decode step of a loaded metagen ``model`` streams: its stored tensors
    (int8 projections and their float32 scales when quantized, float32 norms and biases) but the
    input embedding table. Raises TypeError unless ``model`` is a ``torch.nn.Module``."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, not {type(model).__name__}")
    tensors = [*model.named_parameters(), *model.named_buffers()]
    return sum(t.numel() * t.element_size() for name, t in tensors if name != "embed")
