"""Load a Hugging Face model folder (config.json + *.safetensors, sharded or not) into
:class:`~metagen.engine.models.llama.LlamaModel`, fusing q/k/v and gate/up while loading."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from metagen.engine.models.config import ModelConfig
from metagen.engine.models.llama import LlamaModel
from metagen.errors import ModelLoadError


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no *.safetensors in {folder} (PyTorch .bin checkpoints are not "
                             "supported by the built-in engine; use metagen.HFGenerator)")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        try:
            tensors.update(load_file(str(folder / name)))
        except Exception as exc:  # safetensors raises several types for corrupt files
            raise ModelLoadError(f"cannot read {folder / name}: {exc}") from exc
    return tensors


_PROJECTIONS = ("qkv", "o", "gate_up", "down", "lm_head")


def _stored(name: str, tensor: torch.Tensor) -> torch.Tensor:
    """Hugging Face stores projections ``(out, in)``; the model keeps them ``(in, out)``."""
    if name.rsplit(".", 1)[-1] in _PROJECTIONS:
        return tensor.t().contiguous()
    return tensor


def load_model(path: str | Path, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", max_positions: int | None = None
               ) -> LlamaModel:
    """Build the model of the folder at ``path`` with weights in ``dtype`` on ``device``.

    Raises :class:`ModelLoadError` for a missing/malformed folder, an unsupported architecture
    (naming it and suggesting ``metagen.HFGenerator``) or a missing weight.
    """
    folder = Path(path)
    cfg = ModelConfig.from_folder(folder)
    raw = _read_tensors(folder)

    def take(name: str) -> torch.Tensor:
        for key in (name, f"model.{name}"):
            if key in raw:
                return raw.pop(key)
        raise ModelLoadError(f"weight {name!r} missing from {folder}")

    with torch.device("meta"):
        model = LlamaModel(cfg, max_positions)
    state: dict[str, torch.Tensor] = {"embed": take("embed_tokens.weight"),
                                      "norm": take("norm.weight")}
    if not cfg.tie_word_embeddings:
        state["lm_head"] = raw.pop("lm_head.weight", None)
        if state["lm_head"] is None:
            raise ModelLoadError(f"weight 'lm_head.weight' missing from {folder}")
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        a = p + "self_attn."
        state[p + "qkv"] = torch.cat([take(a + "q_proj.weight"), take(a + "k_proj.weight"),
                                      take(a + "v_proj.weight")])
        if cfg.attention_bias:
            state[p + "qkv_bias"] = torch.cat([take(a + "q_proj.bias"), take(a + "k_proj.bias"),
                                               take(a + "v_proj.bias")])
        if cfg.qk_norm:
            state[p + "q_norm"] = take(a + "q_norm.weight")
            state[p + "k_norm"] = take(a + "k_norm.weight")
        state[p + "o"] = take(a + "o_proj.weight")
        state[p + "input_norm"] = take(p + "input_layernorm.weight")
        state[p + "post_norm"] = take(p + "post_attention_layernorm.weight")
        state[p + "gate_up"] = torch.cat([take(p + "mlp.gate_proj.weight"),
                                          take(p + "mlp.up_proj.weight")])
        state[p + "down"] = take(p + "mlp.down_proj.weight")
    state = {k: _stored(k, v).to(dtype=dtype, device=device) for k, v in state.items()}
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"weights of {folder} do not match its config: {exc}") from exc
    model.build_rope()
    return model.eval()
