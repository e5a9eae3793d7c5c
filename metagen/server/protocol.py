"""uvicorn's h11 protocol with a deadline on every request head (S5: slowloris).

uvicorn times out idle keep-alive connections, but not a request whose headers trickle in a byte
at a time: such a connection is held forever. :func:`head_timeout_protocol` returns a protocol
class that closes a connection whose request head (request line and headers) has not fully
arrived ``seconds`` after the connection opened or after the previous response completed.
Pass it as ``uvicorn.Config(http=...)``; it uses the h11 implementation whatever else is
installed.

Why a subclass of uvicorn's h11 protocol (not a public API): uvicorn has no setting for this.
``timeout_keep_alive`` covers only the idle time between requests and is disarmed by every
received byte, ``h11_max_incomplete_event_size`` bounds the head's size but not its time,
``limit_concurrency`` counts connections, and an ASGI middleware runs only once the head is
complete -- too late. (uvicorn's own plan for a ``--timeout-request-start`` setting, its issue
#157, was never built.) The subclass relies on ``H11Protocol``'s ``connection_made``,
``handle_events``, ``on_response_complete``, ``connection_lost``, ``cycle``, ``loop`` and
``transport``, unchanged from uvicorn 0.29 to 0.54 (the S4/S5/S8 tests pass on both); the
``server`` extra pins ``uvicorn>=0.29,<0.55`` so that a newer uvicorn is taken only once
those tests have run against it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

DEFAULT_HEAD_TIMEOUT_S = 10.0


class _HeadTimeoutH11(H11Protocol):
    head_timeout_s = DEFAULT_HEAD_TIMEOUT_S
    _head_timer: asyncio.TimerHandle | None = None
    _waiting_after: Any = None  # the cycle in place when the deadline was armed

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self._head_timer is not None and self.cycle is not self._waiting_after:
            self._disarm()  # a new request's head arrived

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's head gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._waiting_after = self.cycle
        self._head_timer = self.loop.call_later(self.head_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expired(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def head_timeout_protocol(seconds: float = DEFAULT_HEAD_TIMEOUT_S) -> type[H11Protocol]:
    """An h11 protocol class closing connections whose request head is not complete within
    ``seconds`` (see the module docstring)."""
    return type("HeadTimeoutH11Protocol", (_HeadTimeoutH11,), {"head_timeout_s": float(seconds)})
