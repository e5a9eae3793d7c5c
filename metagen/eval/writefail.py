"""A write to the run folder that fails mid-run (disk full, quota, read-only or failing disk)
becomes one :class:`~metagen.errors.RunFolderWriteError` naming the file, instead of a
traceback (L9). Nothing is lost by it: the store commits one transaction per item, so what
was committed stays and a rerun resumes; ``results.json`` is replaced atomically or not at
all."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from metagen.errors import RunFolderWriteError

# SQLite primary result codes that mean the file system refused a write.
_SQLITE_CODES = {8: "read-only", 10: "disk I/O error", 13: "no space left on device",
                 14: "cannot open the file"}
_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)


def write_failure(exc: BaseException) -> str | None:
    """The reason ``exc`` says a write was refused by the file system, else None (any other
    error, e.g. a corrupt store or a programming error, is not one)."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _SQLITE_CODES:
            return f"{_SQLITE_CODES[code & 0xFF]} (SQLite: {exc})"
        return None
    if isinstance(exc, OSError) and exc.errno in _ERRNOS:
        return os.strerror(exc.errno)
    return None


@contextlib.contextmanager
def folder_writes(path: str | Path, catch: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Within the block, an exception of a type in ``catch`` that :func:`write_failure`
    recognises is raised again as :class:`RunFolderWriteError` for ``path``; others pass."""
    try:
        yield
    except catch as exc:
        reason = write_failure(exc)
        if reason is None:
            raise
        raise RunFolderWriteError(str(path), reason) from exc
