"""Validating the files a caller places in the work directory, and staging them as fds."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import IO

from metagen.errors import InvalidParameterError

PROGRAM_NAME = "main.py"


def checked_files(program: str, files: Mapping[str, str | bytes] | None) -> dict[str, bytes]:
    """``{relative name: bytes}`` with the program as ``main.py``. Names must be relative, free
    of ``..``, and not ``main.py``; otherwise :class:`InvalidParameterError` naming ``files``."""
    if not isinstance(program, str):
        raise InvalidParameterError("program", program, "must be Python source text (str)")
    out = {PROGRAM_NAME: program.encode()}
    for name, content in (files or {}).items():
        path = PurePosixPath(name) if isinstance(name, str) else None
        if (path is None or path.is_absolute() or ".." in path.parts or not path.parts
                or str(path) == PROGRAM_NAME or "\0" in str(path)):
            raise InvalidParameterError(
                "files", name, f"names must be relative paths inside the work dir, not "
                f"{PROGRAM_NAME!r}")
        if not isinstance(content, (str, bytes)):
            raise InvalidParameterError("files", name, "content must be str or bytes")
        out[str(path)] = content.encode() if isinstance(content, str) else bytes(content)
    return out


def staged(content: bytes) -> IO[bytes]:
    """An unlinked temporary file holding ``content``, positioned at 0 (nothing on disk to
    clean up: it vanishes when closed)."""
    f = tempfile.TemporaryFile()
    f.write(content)
    f.flush()
    f.seek(0)
    return f


def checked_run(allow_code_execution: bool | None, program: str,
                files: Mapping[str, str | bytes] | None, limits: object) -> dict[str, bytes]:
    """What every executor checks before running anything: the opt-in to run code, ``limits``
    a :class:`~metagen.sandbox.limits.Limits`, and the files (:func:`checked_files`)."""
    from metagen.sandbox.limits import Limits
    from metagen.sandbox.optin import require_code_execution_allowed

    require_code_execution_allowed(allow_code_execution)
    if not isinstance(limits, Limits):
        raise InvalidParameterError("limits", limits, "must be a metagen.sandbox.Limits")
    return checked_files(program, files)
