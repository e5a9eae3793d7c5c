"""The test process's end of the pipes to the program's process: one call at a time, each under
its own deadline; every reply is untrusted text, validated by :func:`.wire.loads`.

A call that cannot complete — the process died, hung past the deadline, sent a malformed or
oversized reply, or returned a value that is not a primitive — raises :class:`ProgramFailure`
(with a ``kind``) in the test process, so the test that made the call fails. After a death or a
timeout the channel is closed and every later call fails the same way.
"""

from __future__ import annotations

import builtins
import os
import select
import subprocess
import threading
import time
from typing import IO, Any

from . import wire

MAX_REPLY_BYTES = 16 << 20
STDERR_KEPT = 8 << 10


class ProgramFailure(Exception):
    """The program's process could not answer a call. ``kind``: ``timeout``, ``died``,
    ``protocol``, ``bad_value`` or ``load_error``."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Channel:
    """Calls into the program's process ``proc`` (pipes: its stdin/stdout for requests and
    replies, its stderr drained into :attr:`stderr`, the first :data:`STDERR_KEPT` bytes)."""

    def __init__(self, proc: subprocess.Popen[bytes], call_seconds: float) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self.call_seconds = call_seconds
        self.closed: ProgramFailure | None = None
        self._buf = b""
        self._stderr = bytearray()
        self._drain = threading.Thread(target=self._drain_stderr, args=(proc.stderr,),
                                       daemon=True)
        self._drain.start()

    @property
    def stderr(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def hello(self) -> list[str]:
        """The names of the callables the program defines, once it has loaded."""
        reply = self._receive(time.monotonic() + self.call_seconds, "the program's load")
        if reply[0] == "ready" and len(reply) == 2 and type(reply[1]) is list \
                and all(type(n) is str for n in reply[1]):
            return list(reply[1])
        if reply[0] == "load_error" and len(reply) == 2 and type(reply[1]) is str:
            raise self._close(ProgramFailure("load_error", reply[1]))
        raise self._close(ProgramFailure("protocol", f"unexpected first reply {reply!r:.200}"))

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``name(*args, **kwargs)`` in the program's process: its return value, or the builtin
        exception it raised re-raised here (``RuntimeError`` for any other type)."""
        what = f"{name}{_shown(args, kwargs)}"
        request = wire.dumps(["call", name, list(args), kwargs]).encode() + b"\n"
        deadline = time.monotonic() + self.call_seconds
        self._send(request, deadline, what)
        reply = self._receive(deadline, what)
        if reply[0] == "ok" and len(reply) == 2:
            return reply[1]
        if reply[0] == "bad_value" and len(reply) == 2 and type(reply[1]) is str:
            raise ProgramFailure("bad_value", f"{what} returned a {reply[1]}, which is not a "
                                 "primitive value (int, float, str, bool, None, bytes, list, "
                                 "tuple, dict, set)")
        if reply[0] == "raise" and len(reply) == 3 and type(reply[1]) is str \
                and type(reply[2]) is str:
            raise _rebuilt(reply[1], f"{reply[2]} (raised by {what})")
        raise self._close(ProgramFailure("protocol", f"unexpected reply to {what}: "
                                         f"{reply!r:.200}"))

    def shutdown(self) -> None:
        """Close the pipes and kill the program's process (idempotent)."""
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:
                pass
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()
        self._drain.join(1.0)

    def _send(self, data: bytes, deadline: float, what: str) -> None:
        self._check_open()
        fd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(fd, False)
        view = memoryview(data)
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._close(self._timeout(what))
            select.select([], [fd], [], left)
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError):
                raise self._close(self._died(what)) from None

    def _receive(self, deadline: float, what: str) -> list[Any]:
        self._check_open()
        fd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._close(self._timeout(what))
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise self._close(self._died(what))
            self._buf += chunk
            if len(self._buf) > MAX_REPLY_BYTES:
                raise self._close(ProgramFailure(
                    "protocol", f"the reply to {what} is over {MAX_REPLY_BYTES} bytes"))
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = wire.loads(line)
        except wire.WireError as exc:
            raise self._close(ProgramFailure(
                "protocol", f"malformed reply to {what} ({exc}): {line[:120]!r}")) from None
        if type(reply) is not list or not reply or type(reply[0]) is not str:
            raise self._close(ProgramFailure("protocol", f"malformed reply to {what}"))
        return reply

    def _check_open(self) -> None:
        if self.closed is not None:
            raise ProgramFailure(self.closed.kind, f"{self.closed} (earlier)")

    def _close(self, failure: ProgramFailure) -> ProgramFailure:
        self.closed = failure
        self.shutdown()
        return failure

    def _timeout(self, what: str) -> ProgramFailure:
        return ProgramFailure("timeout", f"{what} took longer than {self.call_seconds:g} s")

    def _died(self, what: str) -> ProgramFailure:
        try:
            code = self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        how = "closed its pipe" if code is None else (
            f"was killed by signal {-code}" if code < 0 else f"exited with code {code}")
        return ProgramFailure("died", f"the program's process {how} during {what}")

    def _drain_stderr(self, stream: IO[bytes]) -> None:
        try:
            while chunk := stream.read1(1 << 16):  # type: ignore[attr-defined]
                room = STDERR_KEPT - len(self._stderr)
                if room > 0:
                    self._stderr += chunk[:room]
        except (OSError, ValueError):
            pass


def _shown(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = "(" + ", ".join(parts) + ")"
    return text if len(text) <= 200 else text[:197] + "...)"


def _rebuilt(name: str, message: str) -> Exception:
    """The builtin exception type ``name`` (never a ``BaseException`` such as ``SystemExit``)
    carrying ``message``; ``RuntimeError`` naming the type for anything else."""
    kind = getattr(builtins, name, None) if name.isidentifier() else None
    if isinstance(kind, type) and issubclass(kind, Exception) \
            and not issubclass(kind, ProgramFailure):
        try:
            return kind(message)
        except Exception:
            pass
    return RuntimeError(f"{name}: {message}")
