"""HTTP errors as OpenAI-style bodies: ``{"error": {"message", "type", "param", "code"}}``.

Every failure a client can see goes through :func:`error_response`: the status, a bounded message
(never the request echoed back whole, never a traceback), the ``type`` the openai SDK maps to its
exception classes, and ``param`` naming the request field at fault when there is one.
:func:`api_error` turns metagen's typed exceptions into the right status: a bad parameter or
prompt is a 400 naming it; a non-finite model output a 500; a stopped engine a 503; anything
else a 500 whose message says nothing about the internals.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from metagen.errors import EngineDeadError, InvalidParameterError, NumericalError

MAX_MESSAGE_CHARS = 1000  # error bodies stay far below 64 KB whatever the input was

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
          405: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error", 431: "invalid_request_error", 500: "internal_error",
          503: "service_unavailable"}


class ApiError(Exception):
    """A failure answered with ``status`` and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        message = self.message
        if len(message) > MAX_MESSAGE_CHARS:
            message = message[:MAX_MESSAGE_CHARS] + "...(truncated)"
        return {"error": {"message": message, "type": _TYPES.get(self.status, "error"),
                          "param": self.param, "code": self.code}}


def bad_request(param: str | None, message: str, code: str | None = None) -> ApiError:
    """A 400 naming ``param``."""
    return ApiError(400, message, param=param, code=code)


def api_error(exc: BaseException) -> ApiError:
    """The HTTP face of an exception raised while serving a request (see the module docstring)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InvalidParameterError):
        return ApiError(400, str(exc), param=exc.param)
    if isinstance(exc, NumericalError):
        return ApiError(500, "the model's output turned non-finite (NaN or inf) for this "
                        "request; other requests are unaffected", code="numerical_error")
    if isinstance(exc, EngineDeadError):
        return ApiError(503, "the engine has stopped; this server cannot generate any more",
                        code="engine_dead")
    return ApiError(500, "internal error while generating; the request was aborted",
                    code="internal_error")


def error_response(error: ApiError) -> Response:
    """The JSON response of ``error`` (strict JSON: no NaN can appear in it)."""
    return Response(json.dumps(error.body(), allow_nan=False), status_code=error.status,
                    media_type="application/json", headers=error.headers)


def error_event(error: ApiError) -> str:
    """``error`` as a server-sent event (for failures after a stream has started)."""
    return f"data: {json.dumps(error.body(), allow_nan=False)}\n\n"
