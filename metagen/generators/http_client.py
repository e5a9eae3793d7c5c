"""The one HTTP request/retry layer of metagen's remote backends (OpenAIGenerator, the remote
reward models), on httpx.

:class:`HTTPClient` owns a private asyncio loop thread, one ``httpx.AsyncClient`` (the
transport never retries: this layer is the only one) and a semaphore bounding the requests in
flight to ``max_concurrency`` across every call of its owner. :meth:`HTTPClient.retrying` is the
retry loop: the policy of :mod:`metagen.generators.openai_retry` (429 + ``Retry-After``, 408/5xx
and transport errors with jittered backoff, other 4xx and invalid responses never retried),
every attempt and every wait cut by the caller's ``deadline`` (loop time), so a hanging server
fails at the deadline, not after (retries + 1) x timeout. The error returned is the last
attempt's; when that one got no answer (refused, reset, the deadline) after the server had
answered an earlier one with an error, it also names that answer (a server that failed the
request and then died is reported with its reason). The API key is sent as a bearer header
only and redacted from every error message and log line.

Contract: coroutines run on :attr:`HTTPClient.loop`; the sync owner blocks on them with
:meth:`HTTPClient.run` (an interrupt cancels the call's requests; their connections are
closed). Importing this module imports httpx: callers import it lazily.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import math
import random
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from urllib.parse import urlparse

import httpx

from metagen.errors import (
    BackendError,
    BackendProtocolError,
    BackendTimeout,
    InvalidParameterError,
    TransportError,
)
from metagen.generators.openai_retry import RetryPolicy, http_error, redact

T = TypeVar("T")
R = TypeVar("R")


class LoopThread:
    """A private asyncio loop running forever in a daemon thread."""

    def __init__(self, name: str = "metagen-http-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name=name)
        self.thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("a sync remote-backend method was called from its own loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        future = self.submit(coro)
        try:
            return future.result()
        finally:  # interrupted (KeyboardInterrupt): cancel the call's requests
            future.cancel()

    def close(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
        self.loop.close()


def check_http_options(base_url: object, max_concurrency: object, timeout: object,
                       connect_timeout: object) -> None:
    """Raise ``InvalidParameterError`` naming the first bad connection option."""
    if not isinstance(base_url, str) or urlparse(base_url).scheme not in ("http", "https"):
        raise InvalidParameterError("base_url", base_url, "must be an http(s) URL")
    if not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) \
            or max_concurrency < 1:
        raise InvalidParameterError("max_concurrency", max_concurrency, "must be an int >= 1")
    for name, value in (("timeout", timeout), ("connect_timeout", connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value <= 0:
            raise InvalidParameterError(name, value, "must be a positive finite number")


class HTTPClient:
    """JSON over HTTP with the one retry layer (see the module docstring).

    ``base_url`` is prefixed to every path; ``timeout`` is the per-call deadline callers get
    from :meth:`deadline`; ``connect_timeout`` bounds opening a connection; ``name`` names the
    logger and the loop thread.
    """

    def __init__(self, base_url: str, api_key: str | None, *, policy: RetryPolicy,
                 max_concurrency: int = 16, timeout: float = 60.0,
                 connect_timeout: float = 10.0, name: str = "metagen.http") -> None:
        check_http_options(base_url, max_concurrency, timeout, connect_timeout)
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self.timeout = float(timeout)
        self.max_concurrency = max_concurrency
        self.api_key = api_key
        self.rng = random.Random()
        self.log = logging.getLogger(name)
        self.loop = LoopThread(name.replace(".", "-") + "-loop")
        self.sem = asyncio.Semaphore(max_concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(
            headers=headers, timeout=httpx.Timeout(None, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_concurrency,
                                max_keepalive_connections=max_concurrency),
            transport=httpx.AsyncHTTPTransport(retries=0))  # the only retry layer is ours

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the private loop and wait for it (see the module docstring)."""
        return self.loop.run(coro)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return self.loop.submit(coro)

    def deadline(self) -> float:
        """The loop time ``timeout`` seconds from now (call on the loop)."""
        return asyncio.get_running_loop().time() + self.timeout

    def timed_out(self) -> BackendTimeout:
        return BackendTimeout(f"no response within the call's {self.timeout:g}s deadline")

    async def post_json(self, path: str, body: dict[str, Any], parse: Callable[[Any], R], *,
                        deadline: float, what: str) -> R:
        """``parse`` of the reply to ``POST base_url + path``, under the retry policy; raises
        the last typed :class:`BackendError` when every allowed attempt failed (a failed
        request never becomes a value)."""
        parsed, error, _ = await self.retrying(path, body, parse, deadline, what)
        if error is not None:
            raise error
        assert parsed is not None
        return parsed

    async def retrying(self, path: str, body: dict[str, Any] | None, parse: Callable[[Any], R],
                       deadline: float, what: str
                       ) -> tuple[R | None, BackendError | None, int]:
        """(parsed, None, attempts) or (None, the last typed error, attempts): the one retry
        layer, within ``deadline`` (loop time), for a ``POST`` of ``body`` (a ``GET`` when it
        is None). A ``BackendError`` raised by ``parse`` (an invalid reply) is an attempt's
        error like any other (and is not retried)."""
        loop = asyncio.get_running_loop()
        attempts = 0
        error: BackendError
        answered: BackendError | None = None  # the first error the server itself answered
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                error = self.timed_out()
                break
            attempts += 1
            try:
                data = await asyncio.wait_for(self.attempt(path, body), remaining)
                return parse(data), None, attempts
            except BackendError as exc:
                error = exc
                if answered is None and exc.status is not None:
                    answered = exc
            except asyncio.TimeoutError:
                error = self.timed_out()
                break
            delay = self.policy.delay(error, attempts - 1, self.rng)
            if delay is None or loop.time() + delay > deadline:
                break
            self.log.info("%s %s attempt %d failed (%s); retrying in %.2fs",
                     path, what, attempts, error, delay)
            await asyncio.sleep(delay)
        error = with_earlier_answer(error, answered)
        self.log.warning("%s %s failed after %d attempt(s): %s", path, what, attempts, error)
        return None, error, attempts

    async def attempt(self, path: str, body: dict[str, Any] | None) -> Any:
        """One HTTP request (``POST body``, or ``GET`` when None); its decoded JSON body, or a
        typed :class:`BackendError`."""
        async with self.sem:
            try:
                resp = await (self.client.get(self.base_url + path) if body is None else
                              self.client.post(self.base_url + path, json=body))
            except httpx.HTTPError as exc:
                raise self.transport_error(exc) from None
        if not 200 <= resp.status_code < 300:
            raise http_error(resp.status_code, resp.content, resp.headers.get("retry-after"),
                             self.api_key)
        try:
            return json.loads(resp.content)
        except ValueError as exc:
            raise BackendProtocolError(f"response is not JSON: {exc}", status=resp.status_code,
                                       cause=exc) from None

    @asynccontextmanager
    async def stream_lines(self, path: str, body: dict[str, Any]) -> AsyncIterator[
            AsyncIterator[str]]:
        """The lines of a streamed ``POST`` (one attempt, under the concurrency bound); a
        non-2xx answer and a transport failure raise their typed errors."""
        async with self.sem:
            try:
                async with self.client.stream("POST", self.base_url + path, json=body) as resp:
                    if not 200 <= resp.status_code < 300:
                        raise http_error(resp.status_code, await resp.aread(),
                                         resp.headers.get("retry-after"), self.api_key)
                    yield resp.aiter_lines()
            except httpx.HTTPError as exc:
                raise self.transport_error(exc) from None

    def transport_error(self, exc: BaseException) -> TransportError:
        return TransportError(redact(f"{type(exc).__name__}: {exc}", self.api_key), cause=exc)

    async def aclose(self) -> None:
        await self.client.aclose()

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        if self.loop.thread.is_alive():
            self.loop.run(self.client.aclose())
        self.loop.close()


def with_earlier_answer(error: BackendError, answered: BackendError | None) -> BackendError:
    """``error`` (the last attempt's), naming what the server answered an earlier attempt when
    the last one got no answer at all (refused, reset, the deadline): a server that failed a
    request and then went away -- vLLM answers ``HTTP 500: EngineCore encountered an issue`` to
    the requests in flight when its engine dies, then exits -- is reported with its own reason,
    not only as the connection that a retry found refused. The type (the sample's outcome)
    stays the last attempt's."""
    if answered is None or error.status is not None \
            or not isinstance(error, (TransportError, BackendTimeout)):
        return error
    shown = f"HTTP {answered.status}: {answered.message}"
    return type(error)(f"{error.message} (an earlier attempt was answered {shown})",
                       cause=error.cause)


async def all_or_none(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Wait for every task; if one raises (or the wait is cancelled), cancel the others and
    wait until they have unwound (their requests closed) before re-raising."""
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
