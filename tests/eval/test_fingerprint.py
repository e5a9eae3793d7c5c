"""The content fingerprint of a model folder that the run key holds (L5)."""

from __future__ import annotations

import shutil
from pathlib import Path

from metagen.eval.fingerprint import BLOCK_BYTES, block_offsets, folder_fingerprint

MODELS = Path(__file__).resolve().parents[2] / "metagen" / "testbed" / "models"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_no_folder_has_no_fingerprint(tmp_path):
    assert folder_fingerprint(None) is None
    assert folder_fingerprint(tmp_path / "missing") is None
    assert folder_fingerprint(MODELS / "policy" / "config.json") is None


def test_equal_content_at_two_paths_has_one_fingerprint(tmp_path):
    a = _copy(MODELS / "policy", tmp_path / "a")
    (a / "README.md").write_text("notes")
    (a / ".cache").mkdir()
    (a / ".cache" / "x").write_text("local state")
    assert folder_fingerprint(a) == folder_fingerprint(MODELS / "policy")


def test_weights_of_the_same_size_and_header_are_told_apart_whole_or_sampled(tmp_path):
    """The testbed's policy and ORM have equal configs, sizes and safetensors headers; a file
    hashed whole and a file read by sampled blocks (a threshold below its size) both differ."""
    policy, orm = MODELS / "policy", MODELS / "orm"
    assert (policy / "config.json").read_bytes() == (orm / "config.json").read_bytes()
    swapped = _copy(policy, tmp_path / "m")
    shutil.copy(orm / "model.safetensors", swapped / "model.safetensors")
    for whole in (64 << 20, 1 << 20):
        assert folder_fingerprint(swapped, whole) != folder_fingerprint(policy, whole)
        assert folder_fingerprint(swapped, whole) == folder_fingerprint(orm, whole)


def test_a_large_file_is_read_in_its_header_and_blocks_only(tmp_path):
    """Above the threshold a byte inside a sampled block changes the fingerprint, a byte
    between blocks does not (the documented limit of sampling), a changed size does."""
    folder = tmp_path / "m"
    folder.mkdir()
    size = 64 * BLOCK_BYTES
    (folder / "w.bin").write_bytes(bytes(size))
    base = folder_fingerprint(folder, whole_file_bytes=BLOCK_BYTES)
    offsets = block_offsets(size)
    assert offsets[0] == 0 and offsets[-1] == size - BLOCK_BYTES
    gap = next(o + BLOCK_BYTES for o, p in zip(offsets, offsets[1:]) if p > o + BLOCK_BYTES)

    def flipped(at: int) -> str | None:
        data = bytearray(size)
        data[at] = 1
        (folder / "w.bin").write_bytes(bytes(data))
        return folder_fingerprint(folder, whole_file_bytes=BLOCK_BYTES)

    assert flipped(offsets[5] + 7) != base
    assert flipped(gap) == base
    (folder / "w.bin").write_bytes(bytes(size + 1))
    assert folder_fingerprint(folder, whole_file_bytes=BLOCK_BYTES) != base
