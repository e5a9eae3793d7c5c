"""Load a Hugging Face model folder (config.json + *.safetensors, sharded or not) into
:class:`~metagen.engine.models.llama.LlamaModel`, fusing q/k/v and gate/up and storing every
projection ``(in, out)`` while loading (tensors are read one at a time: see
:mod:`~metagen.engine.models.safetensors_reader`)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from metagen.engine.models.config import ModelConfig
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.safetensors_reader import SafetensorsFiles
from metagen.errors import ModelLoadError


def _read_tensors(folder: Path) -> SafetensorsFiles:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"no *.safetensors in {folder} (PyTorch .bin checkpoints are not "
                             "supported by the built-in engine; use metagen.HFGenerator)")
    return SafetensorsFiles([folder / name for name in files])


def _projection(parts: list[torch.Tensor], dtype: torch.dtype, device: torch.device | str
                ) -> torch.Tensor:
    """Hugging Face ``(out_i, in)`` weights -> one ``(in, sum out_i)`` tensor in ``dtype`` on
    ``device``, each part copied straight into its column slice (no concatenated or transposed
    temporaries, so loading holds no second copy of the weights)."""
    n_in = parts[0].shape[1]
    out = torch.empty(n_in, sum(t.shape[0] for t in parts), dtype=dtype, device=device)
    col = 0
    for t in parts:
        out[:, col:col + t.shape[0]].copy_(t.t())
        col += t.shape[0]
    return out


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

    def proj(*names: str) -> torch.Tensor:
        return _projection([take(n) for n in names], dtype, device)

    with torch.device("meta"):
        model = LlamaModel(cfg, max_positions)
    state: dict[str, torch.Tensor] = {"embed": take("embed_tokens.weight"),
                                      "norm": take("norm.weight")}
    if not cfg.tie_word_embeddings:
        if "lm_head.weight" not in raw:
            raise ModelLoadError(f"weight 'lm_head.weight' missing from {folder}")
        state["lm_head"] = _projection([raw.pop("lm_head.weight")], dtype, device)
    for i in range(cfg.num_layers):
        p = f"layers.{i}."
        a = p + "self_attn."
        state[p + "qkv"] = proj(a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight")
        if cfg.attention_bias:
            state[p + "qkv_bias"] = torch.cat([take(a + "q_proj.bias"), take(a + "k_proj.bias"),
                                               take(a + "v_proj.bias")])
        if cfg.qk_norm:
            state[p + "q_norm"] = take(a + "q_norm.weight")
            state[p + "k_norm"] = take(a + "k_norm.weight")
        state[p + "o"] = proj(a + "o_proj.weight")
        state[p + "input_norm"] = take(p + "input_layernorm.weight")
        state[p + "post_norm"] = take(p + "post_attention_layernorm.weight")
        state[p + "gate_up"] = proj(p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight")
        state[p + "down"] = proj(p + "mlp.down_proj.weight")
    state = {k: v.to(dtype=dtype, device=device) for k, v in state.items()}
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as exc:
        raise ModelLoadError(f"weights of {folder} do not match its config: {exc}") from exc
    model.build_rope()
    return model.eval()
