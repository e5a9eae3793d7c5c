"""The test process: runs the trusted test code against the program, which runs in a child.

Sequence (all inside one sandbox run): read the per-run nonce from stdin; make this process
non-dumpable (so the child cannot open ``/proc/<this pid>/fd/*``, ``mem`` or ``environ``) and a
child subreaper (so nothing the child starts can outlive the cleanup); read and delete the spec
file; start the program's process (:mod:`.child`) with nothing but its three pipes; run the
``setup`` chunks and then each ``tests`` chunk in one namespace where the program's functions
are :class:`Proxy` objects; kill and reap every descendant; only then print the verdict line
``SENTINEL + nonce + " " + wire value`` on stdout. The verdict holds primitives only:
``outcomes`` (one bool per test chunk, or per call), ``kind`` and ``reason`` of the first
failure (empty when every test passed), ``stderr`` (the program's, truncated) and ``values``
(canonical encodings of call results, or None). Exit code 0 means every test passed.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time
import traceback
from typing import Any

from . import wire
from .channel import Channel, ProgramFailure

SENTINEL = "METAGEN-GRADER-VERDICT "
SPEC = "grade.wire"
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


class Proxy:
    """Stands for the program's function ``name``: calling it is a call in the child."""

    def __init__(self, channel: Channel, name: str) -> None:
        self._channel = channel
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            wire.dumps([list(args), kwargs])
        except (wire.WireError, RecursionError) as exc:
            raise ProgramFailure("unsendable", f"the test passes {self.__name__} an argument "
                                 f"that is not a primitive value ({exc})") from None
        return self._channel.call(self.__name__, args, kwargs)


def main() -> int:
    nonce = sys.stdin.readline().strip()
    _harden()
    with open(SPEC, "rb") as f:
        spec = wire.loads(f.read())
    os.unlink(SPEC)  # the program never sees the tests
    channel = Channel(_start_child(), float(spec["call_seconds"]))
    try:
        verdict = grade(channel, spec)
    finally:
        channel.shutdown()
        reap_descendants()
    verdict["stderr"] = channel.stderr
    sys.stdout.flush()
    os.write(1, f"\n{SENTINEL}{nonce} {wire.dumps(verdict)}\n".encode())
    return 0 if not verdict["kind"] else 1


def grade(channel: Channel, spec: dict[str, Any]) -> dict[str, Any]:
    """Run the spec's setup, tests and calls; the verdict (without ``stderr``)."""
    tests, calls = spec["tests"], spec["calls"]
    verdict: dict[str, Any] = {"outcomes": [False] * (len(tests) or len(calls)), "kind": "",
                               "reason": "", "values": [None] * len(calls)}
    ns: dict[str, Any] = {"__name__": "__tests__"}
    for i, chunk in enumerate(spec["setup"]):
        try:
            exec(compile(chunk, f"<setup {i}>", "exec"), ns)
        except Exception as exc:
            verdict.update(kind="setup_error", reason=_describe(exc, chunk, f"<setup {i}>"))
            return verdict
    try:
        names = channel.hello()
    except ProgramFailure as exc:
        verdict.update(kind=exc.kind, reason=str(exc))
        return verdict
    for name in names if spec["proxies"] is None else spec["proxies"]:
        ns[name] = Proxy(channel, name)
    for i, chunk in enumerate(tests):
        try:
            exec(compile(chunk, f"<test {i}>", "exec"), ns)
            verdict["outcomes"][i] = True
        except (Exception, SystemExit) as exc:
            if not verdict["kind"]:
                verdict.update(kind=_kind(exc), reason=_describe(exc, chunk, f"<test {i}>"))
    for i, (name, args) in enumerate(calls):
        try:
            verdict["values"][i] = wire.dumps(ns[name](*args), canonical=True)
            verdict["outcomes"][i] = True
        except Exception:
            pass
    if not tests and not calls:
        verdict.update(kind="error", reason="no tests to run")
    return verdict


def reap_descendants() -> None:
    """Kill and reap every process below this one (orphans come here: we are a subreaper)."""
    me = os.getpid()
    while True:
        for pid in _children(me):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            return
        time.sleep(0.001)


def _harden() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for option in (_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER):
        value = 0 if option == _PR_SET_DUMPABLE else 1
        if libc.prctl(option, value, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl({option}, {value}) failed")


def _start_child() -> subprocess.Popen[bytes]:
    depth = len(__package__.split("."))  # type: ignore[union-attr]
    root = os.path.abspath(__file__)
    for _ in range(depth + 1):
        root = os.path.dirname(root)
    boot = (f"import sys; sys.path.insert(0, {root!r}); "
            f"from {__package__}.child import main; main()")
    return subprocess.Popen([sys.executable, "-I", "-B", "-c", boot], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True)


def _children(ppid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == ppid:
                found.append(int(entry))
    return found


def _kind(exc: BaseException) -> str:
    if isinstance(exc, ProgramFailure):
        return exc.kind
    return "assert" if isinstance(exc, AssertionError) else "error"


def _describe(exc: BaseException, chunk: str, filename: str) -> str:
    """``Type: message``, and the line of ``chunk`` the failure happened at."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(exc, ProgramFailure):
        text = str(exc)
    lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__)
             if f.filename == filename and f.lineno]
    if lines:
        source = chunk.splitlines()[lines[-1] - 1].strip() if lines[-1] <= len(
            chunk.splitlines()) else ""
        text += f" (at test line {lines[-1]}: {source[:300]})"
    return text[:2000]


if __name__ == "__main__":  # pragma: no cover - the sandbox runs main() through a stub
    sys.exit(main())
