"""The retry policy of :class:`~metagen.generators.openai.OpenAIGenerator`, as pure functions.

There is exactly one retry layer (the generator's per-sample loop; the HTTP client never retries):

- HTTP 429: wait the server's ``Retry-After`` (seconds or an HTTP date) when it is at most
  ``max_retry_after``; a longer one fails at once as :class:`RateLimited` carrying it; a missing or
  unparseable one falls back to the jittered exponential backoff.
- HTTP 408, 500, 502, 503, 504 and transport errors (refused, reset, closed mid-body): jittered
  exponential backoff, at most ``max_retries`` retries.
- any other 4xx: never retried (:class:`InvalidRequest` with the status, the blamed param and the
  server's message).
- a response that is not valid (bad JSON, missing fields) and a deadline: never retried.

Every wait is also cut by the sample's deadline: a wait that would pass it fails the sample with
its last error at once.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from metagen.errors import (
    BackendError,
    BackendProtocolError,
    InvalidParameterError,
    InvalidRequest,
    RateLimited,
    ServerError,
    TransportError,
)

RETRYABLE_STATUS = frozenset({408, 500, 502, 503, 504})


@dataclass(slots=True, frozen=True)
class RetryPolicy:
    """``max_retries`` retries after the first attempt; backoff before retry ``k`` (0-based) is
    uniform in ``[d/2, d]`` with ``d = min(backoff_cap, backoff_base * 2**k)``; a 429's
    ``Retry-After`` up to ``max_retry_after`` seconds is honoured instead."""

    max_retries: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.max_retries, int) or isinstance(self.max_retries, bool) \
                or not 0 <= self.max_retries <= 100:
            raise InvalidParameterError("max_retries", self.max_retries,
                                        "must be an int in [0, 100]")
        for name in ("backoff_base", "backoff_cap", "max_retry_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise InvalidParameterError(name, value, "must be a finite number >= 0")

    def backoff(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (0-based), jittered."""
        d = min(self.backoff_cap, self.backoff_base * 2.0 ** min(retry, 60))
        return d / 2 + rng.random() * d / 2

    def delay(self, error: BackendError, retry: int, rng: random.Random) -> float | None:
        """Seconds to wait before retrying after ``error``, or None when it must not be retried
        (not retryable, retries used up, or a ``Retry-After`` beyond ``max_retry_after``)."""
        if retry >= self.max_retries or not is_retryable(error):
            return None
        if isinstance(error, RateLimited) and error.retry_after is not None:
            return error.retry_after if error.retry_after <= self.max_retry_after else None
        return self.backoff(retry, rng)


def is_retryable(error: BackendError) -> bool:
    """Rate limits, 408/5xx and transport errors are retried; protocol errors are not."""
    if isinstance(error, BackendProtocolError):
        return error.status is not None and error.status in RETRYABLE_STATUS
    if isinstance(error, (RateLimited, TransportError)):
        return True
    return isinstance(error, ServerError) and (error.status is None
                                               or error.status in RETRYABLE_STATUS)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds from ``now``: delta-seconds or an HTTP date (a past
    date is 0). None when absent or unparseable."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        now = now or datetime.now(timezone.utc)
        return max(0.0, (when - now).total_seconds())
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def redact(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced."""
    return text.replace(secret, "<redacted>") if secret else text


def http_error(status: int, body: bytes, retry_after: str | None, secret: str | None
               ) -> BackendError:
    """The typed error for a non-2xx response; the message and param come from an OpenAI-style
    ``{"error": {"message", "param"}}`` (or ``{"message"}``, vLLM's) body when there is one. A
    body that is not JSON gives a :class:`BackendProtocolError` wrapping the decode error."""
    message, param, cause = _error_fields(body)
    message = redact(message, secret)
    if status == 429:
        return RateLimited(message, retry_after=parse_retry_after(retry_after), param=param,
                           cause=cause)
    if cause is not None:
        return BackendProtocolError(f"non-JSON error body: {message}", status=status, cause=cause)
    if 400 <= status < 500 and status != 408:
        return InvalidRequest(message, status=status, param=param)
    return ServerError(message, status=status, param=param)


def _error_fields(body: bytes) -> tuple[str, str | None, BaseException | None]:
    text = body.decode("utf-8", "replace")
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        return " ".join(text.split())[:200] or "<empty body>", None, exc
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        message = err.get("message")
        param = err.get("param")
        return (str(message) if message is not None else json.dumps(err)[:200],
                param if isinstance(param, str) else None, None)
    return str(err)[:200], None, None
