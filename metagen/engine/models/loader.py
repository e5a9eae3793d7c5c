"""Load a Hugging Face model folder (config.json + *.safetensors, sharded or not) into the
:class:`~metagen.engine.models.interface.CausalLM` of its architecture's family (the table of
:mod:`~metagen.engine.models.registry`), its :class:`~metagen.engine.models.interface.WeightNames`
saying which tensors are fused into which state (q/k/v and gate/up for the Llama family) and
every projection stored ``(in, out)`` while loading (tensors are read one at a time: see
:mod:`~metagen.engine.models.safetensors_reader`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from metagen.engine.models.config import ModelConfig
from metagen.engine.config import Quantization, check_quantization
from metagen.engine.models.interface import CausalLM, ModelFamily, WeightNames
from metagen.engine.models.registry import family_of
from metagen.engine.models.quantize import quantize_model
from metagen.engine.models.safetensors_reader import SafetensorsFiles
from metagen.engine.models.weight_arena import WeightArena
from metagen.errors import ModelLoadError, UnsupportedArchitectureError


def _read_tensors(folder: Path) -> SafetensorsFiles:
    """The tensors of the folder's ``*.safetensors`` files (those its index names, if any), every
    header checked; raises :class:`ModelLoadError` naming the file that is missing or corrupt."""
    index = folder / "model.safetensors.index.json"
    weight_map = _read_index(index) if index.is_file() else None
    if weight_map is not None:
        files = sorted(set(weight_map.values()))
        for name in files:
            if not (folder / name).is_file():
                raise ModelLoadError(f"{index} names the shard {name!r}, which is missing "
                                     f"from {folder}")
    else:
        files = sorted(p.name for p in folder.glob("*.safetensors"))
    if not files:
        raise UnsupportedArchitectureError(
            f"no *.safetensors in {folder} (PyTorch .bin checkpoints are not supported by the "
            "built-in engine; use metagen.HFGenerator)")
    raw = SafetensorsFiles([folder / name for name in files])
    for tensor, shard in (weight_map or {}).items():
        if tensor not in raw or raw.file_of(tensor).name != shard:
            raise ModelLoadError(f"{index} puts {tensor!r} in {shard!r}, which does not hold it")
    return raw


def _read_index(index: Path) -> dict[str, str]:
    """The ``weight_map`` (tensor -> shard file name) of a sharded checkpoint's index."""
    try:
        weight_map = json.loads(index.read_text()).get("weight_map")
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelLoadError(f"cannot read {index}: {exc}") from exc
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and "/" not in v and v
            for k, v in weight_map.items()):
        raise ModelLoadError(f"{index}: 'weight_map' must map tensor names to shard file names")
    return weight_map


def _stored_name(raw: SafetensorsFiles, name: str) -> str | None:
    """The checkpoint's key for weight ``name`` (``name`` or ``model.name``; the LM head has no
    prefix in Hugging Face checkpoints but is accepted with one)."""
    for key in (name, f"model.{name}"):
        if key in raw:
            return key
    return None


def check_weights(cfg: ModelConfig, raw: SafetensorsFiles, folder: Path,
                  names: WeightNames) -> None:
    """Raise :class:`ModelLoadError` unless the checkpoint holds every weight of ``cfg``
    (``names.shapes``), in its shape and a floating dtype, and no layer beyond
    ``num_hidden_layers``. Reads headers only."""
    layers = {int(m.group(1)) for n in raw.names()
              if (m := re.match(r"(?:model\.)?layers\.(\d+)\.", n))}
    stored = max(layers) + 1 if layers else 0
    if stored != cfg.num_layers:
        raise ModelLoadError(f"{folder / 'config.json'} says num_hidden_layers="
                             f"{cfg.num_layers} but the checkpoint holds weights for {stored} "
                             "layers")
    missing = []
    for name, shape in names.shapes.items():
        key = _stored_name(raw, name)
        if key is None:
            missing.append(name)
        elif raw.shape(key) != shape:
            raise ModelLoadError(f"{raw.file_of(key)}: weight {key!r} has shape "
                                 f"{list(raw.shape(key))} but config.json implies {list(shape)}")
        elif not raw.dtype(key).is_floating_point:
            raise ModelLoadError(f"{raw.file_of(key)}: weight {key!r} has the non-float dtype "
                                 f"{raw.dtype(key)}")
    if missing:
        shown = ", ".join(repr(n) for n in missing[:3])
        raise ModelLoadError(f"{len(missing)} weights are missing from {folder}: {shown}"
                             f"{', ...' if len(missing) > 3 else ''}")


def check_checkpoint(path: str | Path) -> None:
    """The checks :func:`load_model` makes before reading any weight, on their own (headers
    only): config.json describes a model the engine implements with consistent values, every
    safetensors header is sound, and the checkpoint holds every weight of that model, in its
    shape and a floating dtype. Raises what :func:`load_model` raises for the same folder:
    :class:`UnsupportedArchitectureError` for an architecture (or ``.bin``-only checkpoint) the
    engine does not implement, :class:`ModelLoadError` naming the file or field otherwise.
    Other backends call it so that they refuse what the engine refuses (a checkpoint whose
    weights were cast to int8 is refused here, where transformers would cast them back and
    run)."""
    _checked(Path(path))


def _checked(folder: Path) -> tuple[ModelConfig, SafetensorsFiles, ModelFamily, WeightNames]:
    """The config, the headers, the family and the weight names of ``folder``, checked (see
    :func:`check_checkpoint`)."""
    cfg = ModelConfig.from_folder(folder)
    family = family_of(cfg.architecture)
    names = family.weights(cfg)
    raw = _read_tensors(folder)
    check_weights(cfg, raw, folder, names)
    return cfg, raw, family, names


def _tensor(parts: list[torch.Tensor]) -> torch.Tensor:
    """One stored tensor, or several concatenated (a fused bias)."""
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _projection(parts: list[torch.Tensor], out: torch.Tensor) -> torch.Tensor:
    """Hugging Face ``(out_i, in)`` weights -> ``out`` (in, sum out_i), each part copied straight
    into its column slice (no concatenated or transposed temporaries, so loading holds no second
    copy of the weights)."""
    col = 0
    for t in parts:
        out[:, col:col + t.shape[0]].copy_(t.t())
        col += t.shape[0]
    return out


def load_model(path: str | Path, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu", max_positions: int | None = None,
               quantization: Quantization | None = None) -> CausalLM:
    """Build the model of the folder at ``path`` with weights in ``dtype`` on ``device``.

    ``max_positions`` is the number of positions the caller will run (the RoPE tables cover
    exactly that many; default: the config's ``max_position_embeddings``). ``quantization``
    (``"int8"``, ``"w8a8"``, ``"int4"``, ``"int4-all"``) quantizes the projections once loaded
    (:mod:`~.quantize`; ``None``: as loaded).
    :meth:`~metagen.engine.llm_engine.LLMEngine.from_pretrained` passes
    :meth:`~metagen.engine.config.EngineConfig.max_positions`, so a config that claims 10^9
    positions costs no more table than the engine's KV cache can use.

    The config and every safetensors header are checked against each other before any weight is
    read. Raises :class:`UnsupportedArchitectureError` for an architecture (or a ``.bin``-only
    checkpoint) the engine does not implement, and :class:`ModelLoadError` naming the file or
    field for anything else: a missing/malformed folder, an impossible config value, a corrupt or
    truncated file, a missing weight or one whose shape does not match the config.
    """
    check_quantization(quantization)  # before any file is read
    folder = Path(path)
    cfg, raw, family, names = _checked(folder)

    def key(name: str) -> str:
        stored = _stored_name(raw, name)
        assert stored is not None, name  # check_weights found every weight
        return stored

    def take(name: str) -> torch.Tensor:
        return raw.pop(key(name))

    projections = names.projections
    shapes: list[tuple[int, ...]] = [
        (raw.shape(key(parts[0]))[1], sum(raw.shape(key(n))[0] for n in parts))
        for parts in projections.values()]
    embed_shape = raw.shape(key(names.embedding))
    # On CPU every weight that decoding streams whole (the projections, and the embedding table
    # where it is also the head) lives in one buffer on huge pages. Not when quantizing: the
    # quantized copies replace the projections, and a view kept (the embedding) would keep the
    # whole float buffer alive.
    arena = (WeightArena([embed_shape] * cfg.tie_word_embeddings + shapes, dtype)
             if torch.device(device).type == "cpu" and quantization is None else None)
    with torch.device("meta"):
        model = family.model_class(cfg, max_positions)
    state: dict[str, torch.Tensor] = {}
    for name, parts in names.tensors.items():
        if parts == (names.embedding,):
            embed = take(names.embedding)
            if arena is not None and cfg.tie_word_embeddings:
                embed = arena.take(embed_shape).copy_(embed)
            state[name] = embed
        else:
            state[name] = _tensor([take(n) for n in parts])
    for (name, parts), shape in zip(projections.items(), shapes):
        out = (arena.take(shape) if arena is not None
               else torch.empty(shape, dtype=dtype, device=device))
        state[name] = _projection([take(n) for n in parts], out)
    state = {k: v.to(dtype=dtype, device=device) for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)  # names and shapes checked above
    model.build_rope()
    model.eval()
    return quantize_model(model, quantization)
