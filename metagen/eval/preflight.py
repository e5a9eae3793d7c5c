"""Checks of the output folder made before any model is loaded (L9)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from metagen.errors import InvalidParameterError

MIN_FREE_BYTES = 64 << 20  # the store and results.json of a long run; refused below this


def check_output_dir(path: str | Path, min_free_bytes: int | None = None,
                     name: str = "out") -> Path:
    """Create ``path`` if needed and prove it is usable: a file can be created, written, fsynced
    and removed in it, and at least ``min_free_bytes`` (default :data:`MIN_FREE_BYTES`) are
    free. Raises ``InvalidParameterError`` naming ``name`` (the flag) with the reason (one
    line)."""
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".metagen-probe-", dir=folder)
        try:
            os.write(fd, b"x" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as exc:
        raise InvalidParameterError(name, str(folder),
                                    f"is not a writable folder ({exc.strerror or exc})") from None
    need = MIN_FREE_BYTES if min_free_bytes is None else min_free_bytes
    free = shutil.disk_usage(folder).free
    if free < need:
        raise InvalidParameterError(name, str(folder), f"has {free >> 20} MiB free; at least "
                                    f"{need >> 20} MiB are needed")
    return folder
