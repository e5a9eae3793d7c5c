"""Parent-side supervision of one child process: bounded output, stdin, wall clock, reaping.

Shared by the backends. The child's output is read without blocking into buffers capped at
``max_output_bytes``; passing the cap, or the wall clock, ends the run through ``kill_tree``
(which the backend supplies: a process group, a pid namespace, a cgroup). The child is reaped
with ``wait4`` so its CPU time, and that of every descendant it reaped, is known.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_CHUNK = 1 << 16
_DRAIN_SECONDS = 0.2


@dataclass
class Supervised:
    """The raw outcome of one supervised child. ``wait_status`` is None when it never started
    (then ``spawn_error`` says why)."""

    wait_status: int | None
    cpu_seconds: float
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    output_exceeded: bool
    wall_seconds: float
    spawn_error: str = ""


def supervise(argv: Sequence[str], *, env: dict[str, str], cwd: str | None,
              stdin: bytes | None, wall_seconds: float, max_output_bytes: int,
              kill_tree: Callable[[int], None],
              preexec_fn: Callable[[], None] | None = None,
              pass_fds: Sequence[int] = ()) -> Supervised:
    """Run ``argv`` to completion or to a limit; always kill the tree and reap before return."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv), env=env, cwd=cwd, pass_fds=tuple(pass_fds), preexec_fn=preexec_fn,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except (OSError, subprocess.SubprocessError) as exc:
        return Supervised(None, 0.0, b"", b"", False, False, False, False,
                          time.monotonic() - start, f"{type(exc).__name__}: {exc}")
    deadline = start + wall_seconds
    out = {"stdout": bytearray(), "stderr": bytearray()}
    truncated = {"stdout": False, "stderr": False}
    timed_out = exceeded = False
    pending = memoryview(stdin or b"")
    reaped: tuple[int, float] | None = None
    sel = selectors.DefaultSelector()
    try:
        assert proc.stdout is not None and proc.stderr is not None
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, name)
        if proc.stdin is not None:
            if pending:
                os.set_blocking(proc.stdin.fileno(), False)
                sel.register(proc.stdin, selectors.EVENT_WRITE, "stdin")
            else:
                proc.stdin.close()
        exited_at: float | None = None
        while sel.get_map() and not exceeded:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            if reaped is None:
                reaped = _try_reap(proc)
                if reaped is not None:
                    exited_at = now
            # Once the child is gone, take only what is already written, then end the run.
            ready = sel.select(0 if exited_at is not None else min(deadline - now, 0.05))
            if exited_at is not None and (not ready or now - exited_at > _DRAIN_SECONDS):
                break
            for key, _ in ready:
                name = key.data
                fd = key.fileobj.fileno()  # type: ignore[union-attr]
                if name == "stdin":
                    try:
                        pending = pending[os.write(fd, pending[:_CHUNK]):]
                    except BlockingIOError:
                        continue
                    except BrokenPipeError:
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
                    continue
                try:
                    data = os.read(fd, _CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fileobj)
                    continue
                buf = out[name]
                room = max_output_bytes - len(buf)
                buf += data[:room]
                if len(data) > room:
                    truncated[name] = exceeded = True
        # Output closed (or a limit hit): wait for the exit within what is left of the clock.
        while reaped is None and not (timed_out or exceeded):
            reaped = _try_reap(proc)
            if reaped is None:
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                time.sleep(0.005)
    finally:
        sel.close()
        kill_tree(proc.pid)
        status, cpu = reaped if reaped is not None else _reap(proc)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
    return Supervised(status, cpu, bytes(out["stdout"]), bytes(out["stderr"]),
                      truncated["stdout"], truncated["stderr"], timed_out, exceeded,
                      time.monotonic() - start)


def _try_reap(proc: subprocess.Popen[bytes]) -> tuple[int, float] | None:
    """``wait4(WNOHANG)``: the raw wait status and CPU seconds, or None while it runs."""
    try:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return 0, 0.0
    if pid == 0:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, usage.ru_utime + usage.ru_stime


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, float]:
    """Wait for ``proc`` with ``wait4``; returns its raw wait status and CPU seconds."""
    while True:
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0, 0.0
    proc.returncode = os.waitstatus_to_exitcode(status)
    return status, usage.ru_utime + usage.ru_stime
