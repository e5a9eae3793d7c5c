"""The program's process: loads ``solution.py`` and answers calls from the test process.

Started by the test process with three pipes. The requests arrive on stdin and the replies leave
on stdout, both moved to private descriptors first; then stdin reads ``/dev/null`` and
stdout points at stderr, so the program's own prints and ``input()`` cannot disturb the
protocol. Nothing here is trusted by the test process: the program shares this process and can
rewrite any of it, and every reply is validated on the other side.

Protocol (one :mod:`.wire` value per line): first ``["ready", [names of callables]]`` or
``["load_error", text]``; then per request ``["call", name, [args], {kwargs}]`` one of
``["ok", value]``, ``["bad_value", type name]``, ``["raise", exception type name, message]``.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import IO, Any

from . import wire

SOLUTION = "solution.py"


def main() -> None:
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    ns: dict[str, Any] = {"__name__": "__solution__"}
    try:
        with open(SOLUTION, encoding="utf-8") as f:
            source = f.read()
        exec(compile(source, SOLUTION, "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - SystemExit at import is a load failure too
        _reply(replies, ["load_error", _last_lines(exc)])
        return
    names = [k for k, v in ns.items() if callable(v) and not k.startswith("__")]
    _reply(replies, ["ready", names])
    for line in requests:
        _, name, args, kwargs = wire.loads(line)
        fn = ns.get(name)
        if not callable(fn):
            _reply(replies, ["raise", "NameError", f"the program defines no function {name!r}"])
            continue
        try:
            value = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported, the test decides
            _reply(replies, ["raise", type(exc).__name__, str(exc)[:2000]])
            continue
        try:
            text = wire.dumps(["ok", value])
        except (wire.WireError, RecursionError):
            _reply(replies, ["bad_value", type(value).__qualname__])
            continue
        _flush_prints()
        replies.write(text.encode() + b"\n")
        replies.flush()


def _reply(replies: IO[bytes], message: list[Any]) -> None:
    _flush_prints()
    replies.write(wire.dumps(message).encode() + b"\n")
    replies.flush()


def _flush_prints() -> None:
    """What the program printed reaches the stderr pipe before the reply is sent."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the program may have replaced or closed them
            pass


def _last_lines(exc: BaseException) -> str:
    """Why the load failed: the program's own frames, then the exception (bounded)."""
    frames = [f"  {SOLUTION}, line {f.lineno}, in {f.name}: {(f.line or '').strip()}\n"
              for f in traceback.extract_tb(exc.__traceback__) if f.filename == SOLUTION]
    return "".join(frames + traceback.format_exception_only(type(exc), exc))[-2000:]


if __name__ == "__main__":  # pragma: no cover - started by the test process
    main()
