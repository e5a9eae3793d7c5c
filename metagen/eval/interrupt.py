"""SIGINT / SIGTERM during a run: raise :class:`RunInterrupted` in the main thread so the runner
unwinds (the item in flight is rolled back, never half-stored), records a "partial" status and
exits non-zero (L2)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


class RunInterrupted(BaseException):
    """A signal asked the run to stop; ``signum`` says which. A ``BaseException`` so that no
    ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@contextlib.contextmanager
def raising_on_signals() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise :class:`RunInterrupted` (main thread only);
    the previous handlers are restored on exit."""
    def handler(signum: int, frame: FrameType | None) -> None:
        raise RunInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
