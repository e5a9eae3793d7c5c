"""Broken copies of a real checkpoint (stories260K), one per way a model folder can be wrong.

``BROKEN`` maps a case name to ``(break_it, named)``: ``break_it(folder)`` corrupts a fresh copy
in place, and ``named`` is the file or field the one-line error must name. Used by the loader
tests (Python) and the CLI tests (exit status 2).
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

Breaker = Callable[[Path], None]


def copy_checkpoint(source: Path, dest: Path) -> Path:
    """A fresh copy of the model folder ``source`` at ``dest``."""
    shutil.copytree(source, dest)
    return dest


def edit_config(**changes: Any) -> Breaker:
    """Set fields of config.json (a value None deletes the field)."""
    def apply(folder: Path) -> None:
        file = folder / "config.json"
        cfg = json.loads(file.read_text())
        for key, value in changes.items():
            if value is None:
                cfg.pop(key, None)
            else:
                cfg[key] = value
        file.write_text(json.dumps(cfg))
    return apply


def write_config(text: str) -> Breaker:
    """Replace config.json by ``text`` verbatim."""
    def apply(folder: Path) -> None:
        (folder / "config.json").write_text(text)
    return apply


def _header_length(data: bytes) -> int:
    return struct.unpack("<Q", data[:8])[0]


def truncate_data(folder: Path) -> None:
    """Cut the last KiB of tensor data (the header is intact)."""
    file = folder / "model.safetensors"
    file.write_bytes(file.read_bytes()[:-1024])


def garbage_header(folder: Path) -> None:
    """Overwrite the JSON header with bytes that are not JSON (same length)."""
    file = folder / "model.safetensors"
    data = file.read_bytes()
    n = _header_length(data)
    file.write_bytes(data[:8] + b"\x00" * n + data[8 + n:])


def header_past_end(folder: Path) -> None:
    """A header length of 10^12 bytes in a file of about a megabyte."""
    file = folder / "model.safetensors"
    file.write_bytes(struct.pack("<Q", 10**12) + file.read_bytes()[8:])


def too_short(folder: Path) -> None:
    """A safetensors file of 3 bytes."""
    (folder / "model.safetensors").write_bytes(b"abc")


def missing_shard(folder: Path) -> None:
    """Split the weights into two shards with an index, then delete the second shard."""
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, folder / shard, metadata={"format": "pt"})
    weight_map = {k: shard for shard, keys in shards.items() for k in keys}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "model-00002-of-00002.safetensors").unlink()


def cast_to_int8(folder: Path) -> None:
    """Every tensor stored as int8 (``tensor.to(torch.int8)``: the values truncated), shapes
    and names kept -- a checkpoint a careless conversion script writes."""
    import torch
    from safetensors.torch import load_file, save_file

    file = folder / "model.safetensors"
    tensors = {k: v.to(torch.int8) for k, v in load_file(file).items()}
    save_file(tensors, file, metadata={"format": "pt"})


BROKEN: dict[str, tuple[Breaker, str]] = {
    "more_layers_than_weights": (edit_config(num_hidden_layers=50), "num_hidden_layers"),
    "negative_hidden_size": (edit_config(hidden_size=-64), "hidden_size"),
    "zero_hidden_size": (edit_config(hidden_size=0), "hidden_size"),
    "fractional_hidden_size": (edit_config(hidden_size=64.5), "hidden_size"),
    "float_where_int_belongs": (edit_config(num_hidden_layers=5.0), "num_hidden_layers"),
    "float_max_positions": (edit_config(max_position_embeddings=1e9),
                            "max_position_embeddings"),
    "string_vocab_size": (edit_config(vocab_size="512"), "vocab_size"),
    "zero_vocab_size": (edit_config(vocab_size=0), "vocab_size"),
    "heads_do_not_divide_hidden": (edit_config(num_attention_heads=7, num_key_value_heads=7,
                                               head_dim=None), "hidden_size"),
    "kv_heads_do_not_divide_heads": (edit_config(num_key_value_heads=3), "num_key_value_heads"),
    "negative_rms_norm_eps": (edit_config(rms_norm_eps=-1e-5), "rms_norm_eps"),
    "hidden_size_not_the_weights": (edit_config(hidden_size=128, head_dim=16),
                                    "model.safetensors"),
    "config_is_a_list": (write_config("[1, 2, 3]"), "config.json"),
    "config_is_not_json": (write_config("{oops"), "config.json"),
    "truncated_data": (truncate_data, "model.safetensors"),
    "garbage_header": (garbage_header, "model.safetensors"),
    "header_length_past_end": (header_past_end, "model.safetensors"),
    "file_too_short": (too_short, "model.safetensors"),
    "index_names_missing_shard": (missing_shard, "model-00002-of-00002.safetensors"),
    "weights_cast_to_int8": (cast_to_int8, "model.safetensors"),
}
