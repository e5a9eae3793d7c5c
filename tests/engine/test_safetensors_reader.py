"""SafetensorsFiles against the safetensors library's own writer, and its errors on bad files."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from metagen.engine.models.safetensors_reader import SafetensorsFiles
from metagen.errors import ModelLoadError


def test_reads_back_what_safetensors_wrote(tmp_path):
    g = torch.Generator().manual_seed(0)
    tensors = {"w": torch.randn(5, 3, generator=g), "b": torch.randn(7, generator=g).bfloat16(),
               "h": torch.randn(2, 2, generator=g).half(), "i": torch.arange(6).view(2, 3),
               "m": torch.tensor([True, False, True]), "s": torch.tensor(2.5)}
    save_file({k: v for k, v in tensors.items() if k in "wbh"}, str(tmp_path / "a.safetensors"))
    save_file({k: v for k, v in tensors.items() if k in "ims"}, str(tmp_path / "b.safetensors"))
    files = SafetensorsFiles([tmp_path / "a.safetensors", tmp_path / "b.safetensors"])
    for name, ref in tensors.items():
        assert name in files
        got = files.pop(name)
        assert got.dtype == ref.dtype and got.shape == ref.shape and torch.equal(got, ref)
        assert name not in files


def test_truncated_file_is_a_load_error(tmp_path):
    path = tmp_path / "t.safetensors"
    save_file({"w": torch.ones(64, 64)}, str(path))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(ModelLoadError, match="truncated"):
        SafetensorsFiles([path]).pop("w")


def test_garbage_header_is_a_load_error(tmp_path):
    path = tmp_path / "g.safetensors"
    path.write_bytes((12).to_bytes(8, "little") + b"not json!!!!")
    with pytest.raises(ModelLoadError, match="cannot read"):
        SafetensorsFiles([path])


def _write(path, header: dict, data: bytes) -> None:
    import json

    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)


@pytest.mark.parametrize("header, data, message", [
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 8, "truncated"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}, b"\0" * 16, "12 bytes"),
    ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}}, b"\0" * 16, "data_offsets"),
    ({"w": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}}, b"\0" * 16, "shape"),
    ({"w": {"dtype": "Q4", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16, "dtype"),
    ({"w": [1, 2]}, b"", "not a JSON object"),
    ([1, 2], b"", "not a JSON object"),
])
def test_malformed_entries_are_load_errors_before_reading(tmp_path, header, data, message):
    path = tmp_path / "m.safetensors"
    _write(path, header, data)
    with pytest.raises(ModelLoadError, match=message) as info:
        SafetensorsFiles([path])
    assert str(path) in str(info.value)


def test_header_length_past_the_end_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "h.safetensors"
    path.write_bytes((2**62).to_bytes(8, "little") + b"{}")
    with pytest.raises(ModelLoadError, match="header length .* runs past the end"):
        SafetensorsFiles([path])
