"""The ASGI middleware in front of every route: authentication, body-size and admission limits,
metrics, and a last-resort 500 that says nothing about the internals.

Order per request, before any byte of the body is read: (0) more headers or header bytes than
the caps is a 431 (the HTTP parser bounds a head only while it arrives in pieces; one sent in a
single chunk is checked here). (1) With an API key, every path but
``/health`` -- unknown paths included -- needs ``Authorization: Bearer KEY``, compared in
constant time (``hmac.compare_digest``) and never logged; otherwise 401. (2) A ``Content-Length``
over the cap is a 413 (a body without one is counted as it is read, see
:func:`metagen.server.body.read_capped`). (3) A generation request beyond ``max_concurrent`` in
flight is a 429 with ``Retry-After`` at once. Every response is counted in the metrics under its
route (unknown paths as ``other``) and status.
"""

from __future__ import annotations

import hmac
import logging
import time
from dataclasses import dataclass, field

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metagen.server.body import too_large
from metagen.server.config import PUBLIC_PATHS, ServerConfig
from metagen.server.errors import ApiError, api_error, error_response
from metagen.server.metrics import Metrics

log = logging.getLogger("metagen.server")
GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
ROUTES = GENERATION_PATHS | {"/health", "/metrics", "/v1/models", "/tokenize", "/detokenize",
                             "/tokenizer_info", "/version"}
RETRY_AFTER_S = "1"


@dataclass(slots=True)
class ServerState:
    """What the guard and the routes share."""

    config: ServerConfig
    metrics: Metrics = field(default_factory=Metrics)
    in_flight: int = 0


class Guard:
    """See the module docstring."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app, self.state = app, state
        key = state.config.api_key
        self._expected = None if key is None else b"Bearer " + key.encode("ascii")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        start = time.monotonic()
        status = {"code": 500, "started": False}

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"], status["started"] = message["status"], True
            await send(message)

        try:
            refusal = self._refusal(scope)
            if refusal is not None:
                await error_response(refusal)(scope, receive, watched)
                return
            await self._admit(path, scope, receive, watched)
        except Exception as exc:  # noqa: BLE001 -- last resort: never a traceback to the client
            log.exception("unhandled error serving %s", path)
            if not status["started"]:
                await error_response(api_error(exc))(scope, receive, watched)
        finally:
            self.state.metrics.observe(path if path in ROUTES else "other", int(status["code"]),
                                       time.monotonic() - start)

    async def _admit(self, path: str, scope: Scope, receive: Receive, send: Send) -> None:
        if path not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        limit = self.state.config.max_concurrent
        if self.state.in_flight >= limit:
            error = ApiError(429, f"the server is serving its limit of {limit} requests; retry "
                             "later", code="too_many_requests",
                             headers={"Retry-After": RETRY_AFTER_S})
            await error_response(error)(scope, receive, send)
            return
        self.state.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.state.in_flight -= 1

    def _refusal(self, scope: Scope) -> ApiError | None:
        headers = scope.get("headers") or []
        cfg = self.state.config
        size = sum(len(k) + len(v) for k, v in headers)
        if len(headers) > cfg.max_headers or size > cfg.max_header_bytes:
            return ApiError(431, f"request headers too large (at most {cfg.max_headers} "
                            f"headers and {cfg.max_header_bytes} bytes)",
                            code="headers_too_large", headers={"Connection": "close"})
        if self._expected is not None and scope["path"] not in PUBLIC_PATHS:
            given = next((v for k, v in headers if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self._expected):
                return ApiError(401, "missing or invalid API key (send Authorization: Bearer "
                                "KEY)", code="invalid_api_key",
                                headers={"WWW-Authenticate": "Bearer"})
        length = next((v for k, v in headers if k == b"content-length"), None)
        if length is not None:
            if not length.isdigit():
                return ApiError(400, "invalid Content-Length header", code="invalid_header")
            if len(length) > 18 or int(length) > cfg.max_body_bytes:
                return too_large(cfg.max_body_bytes)
        return None
