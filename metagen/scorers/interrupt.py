"""Stopping a synchronous scorer call between its batches, from another thread.

A scorer's forward passes run in the caller's thread and cannot be aborted mid-pass; what can
stop is the rest of the call. :func:`interruptible` makes ``flag`` (a ``threading.Event``) the
interrupt of the scorer calls made inside its ``with`` block (in that thread, or in a task that
copies its context); :func:`check_interrupt` -- called by the scorers before each batch -- raises
:class:`~metagen.errors.CallCancelled` once the flag is set, so a call whose caller has gone
(the HTTP client of a strategy request) runs at most the batch in progress. Outside any block
it does nothing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from contextvars import ContextVar

from metagen.errors import CallCancelled

_FLAG: ContextVar[threading.Event | None] = ContextVar("metagen_scorer_interrupt", default=None)


@contextlib.contextmanager
def interruptible(flag: threading.Event) -> Iterator[None]:
    """Scorer calls inside the block stop before their next batch once ``flag`` is set."""
    token = _FLAG.set(flag)
    try:
        yield
    finally:
        _FLAG.reset(token)


def interrupted() -> bool:
    """Whether the enclosing :func:`interruptible` block's flag is set (False outside one)."""
    flag = _FLAG.get()
    return flag is not None and flag.is_set()


def check_interrupt(what: str) -> None:
    """Raise :class:`~metagen.errors.CallCancelled` naming ``what`` when :func:`interrupted`."""
    if interrupted():
        raise CallCancelled(f"{what} was cancelled by its caller")
