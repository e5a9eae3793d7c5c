"""A server process on loopback, as the benchmarks and the optional slow tests start them (vLLM,
llama.cpp's server, ``metagen serve``): a free port, waiting for its health check, and stopping
its process group by the pid that started it.

:func:`wait_healthy` polls ``GET root + path`` until it answers 200 and raises
:class:`ServerStartError` (a RuntimeError, with the tail of the server's log) when the process
exits first or the time runs out; :func:`stop` sends SIGTERM to the process group, then SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


class ServerStartError(RuntimeError):
    """A server exited or did not become healthy in time; the message has its log tail."""


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (bound and released: another process may take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def log_tail(log: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of ``log`` (``<no log>`` when it cannot be read)."""
    try:
        return log.read_text(errors="replace")[-chars:]
    except OSError:
        return "<no log>"


def wait_healthy(root: str, proc: subprocess.Popen[bytes], log: Path, seconds: float,
                 path: str = "/health", who: str = "the server") -> float:
    """Seconds until ``GET root + path`` answered 200; :class:`ServerStartError` (naming the
    server ``who``) if the process exits first or ``seconds`` pass."""
    import httpx

    start = time.monotonic()
    while time.monotonic() - start < seconds:
        if proc.poll() is not None:
            raise ServerStartError(f"{who} exited ({proc.returncode}) while starting:\n"
                                   + log_tail(log))
        try:
            if httpx.get(root + path, timeout=2.0).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise ServerStartError(f"{who} not healthy within {seconds:g}s:\n" + log_tail(log))


def stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM to the server's process group (its engine core is a child process), then
    SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:  # the group also when the leader is gone (an orphaned engine core)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
