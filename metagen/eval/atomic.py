"""Atomic file writes (L10): a reader sees the old file or the new one, never a torn one."""

from __future__ import annotations

import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Any


def _read_umask() -> int:
    mask = os.umask(0o022)  # the process umask can only be read by setting it
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import (setting it is not thread-safe)


def write_atomic(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path``: a temp file in the same folder, fsync, ``os.replace``, then
    fsync of the folder so the rename itself survives a crash. The temp file is removed on
    error; ``path`` is untouched unless the replace happened. The file gets the permissions a
    plain ``open(path, "w")`` would give it: an existing file keeps its mode, a new one gets
    0o666 less the umask (never the temp file's owner-only 0o600)."""
    target = Path(path)
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666 & ~_UMASK
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    """:func:`write_atomic` of ``obj`` as indented, key-sorted JSON (NaN written as null)."""
    text = json.dumps(_finite(obj), indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    return write_atomic(path, text.encode("ascii"))


def _finite(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
