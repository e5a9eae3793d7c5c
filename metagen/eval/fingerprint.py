"""A content fingerprint of a local model folder, cheap enough for any checkpoint (L5).

The run key holds it so that weights replaced at the same path make a new key instead of
mixing two models' samples in one run. What it covers: every regular file under the folder
(symbolic links followed, as a loader would; names starting with ``.`` and ``*.md`` files
skipped: they change no output), each by its path relative to the folder, its size, and

- for a file of at most :data:`WHOLE_FILE_BYTES`: the sha256 of all its bytes (every config,
  tokenizer and small checkpoint: exact);
- for a larger one: the sha256 of its safetensors header (the 8-byte length and the JSON
  header: names, dtypes, shapes, offsets) when it has one, and of :data:`SAMPLED_BLOCKS` blocks
  of :data:`BLOCK_BYTES` at evenly spaced offsets (the first and the last included). At most
  about 1 MiB plus the header is read per file, whatever its size.

Two checkpoints of one architecture have equal sizes and equal headers, so the sampled blocks
are what tells them apart; a change confined to bytes that no block covers (e.g. a few
fine-tuned tensors of a large shard) is not seen. A folder that does not exist has no
fingerprint (the load then fails on its own).
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import BinaryIO

from metagen.eval.runkey import file_sha256

WHOLE_FILE_BYTES = 64 << 20
SAMPLED_BLOCKS = 16
BLOCK_BYTES = 64 << 10
MAX_HEADER_BYTES = 100 << 20  # the safetensors format's own limit on the header


def folder_fingerprint(path: str | Path | None,
                       whole_file_bytes: int = WHOLE_FILE_BYTES) -> str | None:
    """Hex sha256 over the folder's files as described in the module docstring; None when
    ``path`` is None or not a folder. Raises ``OSError`` for a file that cannot be read."""
    if path is None or not Path(path).is_dir():
        return None
    root = Path(path)
    digest = hashlib.sha256()
    for file in sorted(_content_files(root)):
        size = file.stat().st_size
        content = (file_sha256(file) if size <= whole_file_bytes
                   else sampled_sha256(file, size))
        digest.update(f"{file.relative_to(root).as_posix()}\0{size}\0{content}\n".encode())
    return digest.hexdigest()


def sampled_sha256(path: Path, size: int) -> str:
    """Hex sha256 of a large file's safetensors header (when it has one) and its sampled
    blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        digest.update(_safetensors_header(fh, size))
        for offset in block_offsets(size):
            fh.seek(offset)
            digest.update(fh.read(BLOCK_BYTES))
    return digest.hexdigest()


def block_offsets(size: int) -> list[int]:
    """:data:`SAMPLED_BLOCKS` offsets from 0 to ``size - BLOCK_BYTES``, evenly spaced."""
    last = max(size - BLOCK_BYTES, 0)
    return sorted({last * i // (SAMPLED_BLOCKS - 1) for i in range(SAMPLED_BLOCKS)})


def _safetensors_header(fh: BinaryIO, size: int) -> bytes:
    """The file's first 8 bytes, and the header they announce when it fits the file."""
    prefix = fh.read(8)
    if len(prefix) < 8:
        return prefix
    length = struct.unpack("<Q", prefix)[0]
    if not 0 < length <= min(MAX_HEADER_BYTES, size - 8):
        return prefix
    return prefix + fh.read(length)


def _content_files(root: Path) -> list[Path]:
    """Regular files under ``root`` that can change outputs (hidden names and ``*.md``
    skipped)."""
    return [p for p in root.rglob("*")
            if p.is_file() and p.suffix.lower() != ".md"
            and not any(part.startswith(".") for part in p.relative_to(root).parts)]
