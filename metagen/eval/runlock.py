"""One evaluation at a time per output folder: an exclusive ``flock`` on ``run.lock`` inside it,
held for the whole run. The operating system releases it when the process ends, however it
ends (a SIGKILL included), so a stale lock never blocks a rerun. A second process does not
wait: it gets :class:`~metagen.errors.RunFolderBusyError` naming ``out`` (and the holder's pid)
before it loads anything. The lock file is left in place (removing it would race a newcomer).
Locks are per open file, so this holds across processes, not between two runs in one process
that open the file separately (they get the same refusal)."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from metagen.errors import RunFolderBusyError

LOCK_NAME = "run.lock"


@contextlib.contextmanager
def run_folder_lock(folder: str | Path) -> Iterator[Path]:
    """Hold the folder's lock within the block (yields the lock file's path); raises
    :class:`RunFolderBusyError` at once when another holder has it."""
    path = Path(folder) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderBusyError(str(folder), _holder(fd)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # closing the only descriptor of the open file releases the lock


def _holder(fd: int) -> int | None:
    """The pid the holder wrote, if readable."""
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
