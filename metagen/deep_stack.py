"""Run a call on a thread with a large stack: llguidance builds a grammar recursively.

llguidance's grammar construction (``LLMatcher.validate_grammar``, ``LLMatcher(...)`` and its
first mask) recurses once per nested rule reference: on a default 8 MiB thread stack a Lark
grammar whose rules chain about 3,000 deep (``r0: "x" r1``, ``r1: "x" r2``, ...; 75 KB of text),
or a JSON schema whose ``$ref`` chain is as deep, overflows the stack and the whole process dies
with SIGSEGV -- a single request taking every other down with it. :func:`on_deep_stack` runs
such a call on a fresh thread whose stack (``DEEP_STACK_BYTES``, reserved address space, not
memory: pages are committed only as the recursion touches them) holds the deepest chain a
constraint within ``MAX_CONSTRAINT_CHARS`` can spell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEEP_STACK_BYTES = 1 << 30  # 1 GiB of address space: ~100k chained rules at ~3 KiB each
_START = threading.Lock()  # threading.stack_size is process-wide: set, start, restore


def on_deep_stack(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` run on a new thread with a ``DEEP_STACK_BYTES`` stack; its result, or its
    exception re-raised here. Blocks the caller until it returns."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append((True, fn(*args)))
        except BaseException as exc:  # handed to the caller, not swallowed
            out.append((False, exc))

    with _START:
        previous = threading.stack_size(DEEP_STACK_BYTES)
        try:
            worker = threading.Thread(target=run, name="metagen-deep-stack", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]
