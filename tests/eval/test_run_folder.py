"""The run folder's lock and the typed error of a failed write, in process (the CLI tests run
them with real processes and a real full tmpfs)."""

from __future__ import annotations

import errno
import os
import sqlite3

import pytest

from metagen.errors import RunFolderBusyError, RunFolderWriteError
from metagen.eval.runlock import run_folder_lock
from metagen.eval.writefail import folder_writes, write_failure


def test_a_held_folder_is_refused_naming_out_and_the_holder_until_released(tmp_path):
    with run_folder_lock(tmp_path):
        with pytest.raises(RunFolderBusyError) as info:
            with run_folder_lock(tmp_path):
                pass  # pragma: no cover
        assert info.value.param == "out" and info.value.holder == os.getpid()
        assert "in use" in str(info.value)
    with run_folder_lock(tmp_path) as path:  # released on exit
        assert path.read_text().strip() == str(os.getpid())


def test_only_refused_writes_become_run_folder_write_errors(tmp_path):
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert write_failure(full) == os.strerror(errno.ENOSPC)
    with pytest.raises(RunFolderWriteError) as info:
        with folder_writes(tmp_path / "results.json", (OSError,)):
            raise full
    assert str(tmp_path / "results.json") in str(info.value)
    assert info.value.__cause__ is full
    db = sqlite3.connect(":memory:")
    with pytest.raises(sqlite3.OperationalError):  # a programming error passes unchanged
        with folder_writes(tmp_path / "run.sqlite", (sqlite3.Error,)):
            db.execute("SELEC 1")
    with pytest.raises(FileNotFoundError):  # and so does an errno that is not a refused write
        with folder_writes(tmp_path / "x", (OSError,)):
            open(tmp_path / "missing" / "x")
