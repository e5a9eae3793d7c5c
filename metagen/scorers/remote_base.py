"""What the remote reward models share: the connection (the one retry layer of
:class:`~metagen.generators.http_client.HTTPClient`), batching into requests, failure naming and
usage accounting.

A call sends its inputs in requests of at most ``batch_size`` inputs, concurrently (at most
``max_concurrency`` in flight), each under the retry policy, all within the call's ``timeout``.
If one request still fails, the others are cancelled and the call raises that request's typed
:class:`~metagen.errors.BackendError`, its message prefixed with the reward model's name and
server (API key redacted): a failed reward call is an exception, never a score of 0 or NaN.

``usage``: one ``scorer_calls`` per ``score`` / ``score_steps`` call; ``scorer_tokens`` the
replies' ``usage.prompt_tokens``; ``scorer_flops`` = ``2 x num_params x scorer_tokens`` when
``num_params`` is declared and every reply reported its tokens, else NaN (unknown, never 0). A
reply without usage is counted in ``missing_usage``.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from metagen.errors import BackendError, InvalidParameterError, ModelLoadError, RateLimited
from metagen.scorers.remote_wire import APIS, PATHS, Api, reply_tokens
from metagen.scorers.usage import UsageMeter
from metagen.types import Usage

T = TypeVar("T")


class RemoteScorer:
    """Connection, batching and accounting of a remote reward model (see the module
    docstring). ``base_url`` is the server root (``http://host:8000``): the ``api``'s path
    (``/pooling``, ``/classify`` or ``/score``) is appended to it. Retry options are those of
    :class:`~metagen.generators.openai_retry.RetryPolicy`."""

    def __init__(self, base_url: str, model: str, *, api: Api, api_key: str | None = None,
                 batch_size: int = 64, max_concurrency: int = 4, timeout: float = 60.0,
                 max_retries: int = 3, backoff_base: float = 0.5, backoff_cap: float = 8.0,
                 max_retry_after: float = 30.0, connect_timeout: float = 10.0,
                 num_params: int | None = None) -> None:
        if not isinstance(model, str) or not model:
            raise InvalidParameterError("model", model, "must be a non-empty string")
        if api not in APIS:
            raise InvalidParameterError("api", api, f"must be one of {', '.join(APIS)}")
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InvalidParameterError("batch_size", batch_size, "must be an int >= 1")
        if num_params is not None and (not isinstance(num_params, int) or num_params <= 0):
            raise InvalidParameterError("num_params", num_params, "must be a positive int or None")
        from metagen.generators.http_client import HTTPClient  # lazy: httpx
        from metagen.generators.openai_retry import RetryPolicy

        policy = RetryPolicy(max_retries, backoff_base, backoff_cap, max_retry_after)
        self._http = HTTPClient(base_url, api_key, policy=policy, max_concurrency=max_concurrency,
                                timeout=timeout, connect_timeout=connect_timeout,
                                name="metagen.reward")
        self.base_url = self._http.base_url
        self.model = model
        self.api = api
        self.path = PATHS[api]
        self.batch_size = batch_size
        self.num_params = num_params
        self.missing_usage = 0
        self._meter = UsageMeter()
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the key
        return f"{type(self).__name__}({self.base_url!r}, {self.model!r}, api={self.api!r})"

    @property
    def usage(self) -> Usage:
        """Cumulative scorer usage (see the module docstring)."""
        with self._lock:
            return self._meter.usage

    def _call(self, bodies: Sequence[dict[str, Any]],
              parse: Callable[[int, Any], list[T]]) -> list[T]:
        """POST every body (concurrently, each under the retry policy, one deadline) and return
        the concatenation of ``parse(k, reply_k)``; raises the first failure (named)."""
        with self._meter.timed():
            return self._http.run(self._post_all(bodies, parse))

    async def _post_all(self, bodies: Sequence[dict[str, Any]],
                        parse: Callable[[int, Any], list[T]]) -> list[T]:
        from metagen.generators.http_client import all_or_none

        deadline = self._http.deadline()
        tokens: list[int | None] = []

        def parse_counted(k: int) -> Callable[[Any], list[T]]:
            def run(data: Any) -> list[T]:
                out = parse(k, data)  # a reply that fails validation is not counted
                tokens.append(reply_tokens(data))
                return out
            return run

        tasks = [asyncio.ensure_future(self._http.post_json(
            self.path, body, parse_counted(k), deadline=deadline,
            what=f"{self.model} request {k}")) for k, body in enumerate(bodies)]
        try:
            await all_or_none(tasks)
        except BackendError as exc:
            raise self._named(exc) from exc
        finally:
            self._account(tokens)
        return [x for t in tasks for x in t.result()]

    def _named(self, error: BackendError) -> BackendError:
        """The same typed error, its message naming this reward model and its server."""
        kwargs: dict[str, Any] = {"status": error.status, "param": error.param,
                                  "cause": error.cause}
        if isinstance(error, RateLimited):
            kwargs["retry_after"] = error.retry_after
        return type(error)(f"reward model {self.model!r} at {self.base_url}{self.path}: "
                           f"{error.message}", **kwargs)

    def _account(self, tokens: list[int | None]) -> None:
        known = [t for t in tokens if t is not None]
        missing = len(tokens) - len(known)
        flops = math.nan if self.num_params is None or missing \
            else 2.0 * self.num_params * sum(known)
        with self._lock:
            self._meter.add(sum(known), flops, calls=1)
            self.missing_usage += missing

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        self._http.close()

    def __enter__(self) -> RemoteScorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def chunks(items: Sequence[T], size: int) -> list[list[T]]:
    """``items`` in consecutive lists of at most ``size``."""
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def load_tokenizer(tokenizer: Any, why: str) -> Any:
    """The reward model's own fast tokenizer (offsets are needed): loaded from a folder, or the
    given one; ``InvalidParameterError`` naming ``tokenizer`` when None (``why`` says what it
    is for), ``ModelLoadError`` when it cannot be loaded or is not fast."""
    if tokenizer is None:
        raise InvalidParameterError("tokenizer", None, f"the reward model's own tokenizer (its "
                                    f"folder or a loaded fast tokenizer) is needed {why}")
    if isinstance(tokenizer, (str, Path)):
        try:
            from transformers import AutoTokenizer
            tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"{tokenizer}: cannot load the reward model's tokenizer: "
                                 f"{exc}") from exc
    if not getattr(tokenizer, "is_fast", False):
        raise ModelLoadError("the reward model's tokenizer must be a fast tokenizer (offsets)")
    return tokenizer
