"""OpenAIGenerator: the Generator protocol over any OpenAI-compatible server (vLLM, SGLang,
llama.cpp's and llama-cpp-python's servers, OpenAI itself), on httpx.

**One request per sample.** ``generate(prompts, params)`` sends ``len(prompts) * params.n``
requests with ``n=1`` rather than one request with ``n``: each sample then has its own outcome
(``ok``, ``invalid_request``, ``rate_limited``, ``timeout``, ``server_error``,
``transport_error``) and its own retries, so one failed sample costs one sample,
not the whole group. Sample ``i`` of a seeded request depends on (seed, i) only: to metagen's
server it carries the seed and ``sample_index`` ``i``, and is the very sample ``LocalGenerator``
draws as sample ``i`` of the same :class:`SamplingParams` on the same model (the same token
ids); to other servers it carries the seed ``seed + i`` (reproducible where the server's seeded
sampling is, never equal to the built-in engine's samples). Servers with prefix caching (vLLM,
SGLang) prefill a shared prompt once anyway.

**Failures are samples, not exceptions.** A sample that still fails after the retry policy
(:mod:`metagen.generators.openai_retry`) comes back as ``Completion(text="",
finish_reason="error", stop_reason=<outcome>)`` at its index, which every strategy already drops
and counts (``Result.failures``; ``min_successful`` raises ``InsufficientSamples``).
:meth:`OpenAIGenerator.agenerate_samples` returns the typed error of each sample. Only a request
that can never succeed for any sample -- HTTP 401, 403 or 404 (a wrong key, URL or model) -- is
raised from ``generate`` (as :class:`~metagen.errors.InvalidRequest`).

**Retried samples.** A retry resends the identical body, seed included: on a server whose seeded
sampling is deterministic the retried sample is the same sample the failed attempt would have
been (a retry does not change the distribution or the votes).

**Cancellation.** Cancelling a call (the task awaiting ``agenerate``, or an interrupt of
``generate``) cancels all of its outstanding requests -- their connections are closed, so the
server sees the disconnect and can stop generating -- and raises ``CancelledError`` /
the interrupt; no partial result is returned (there is no per-sample ``cancelled`` outcome).

**Logprobs.** ``Completion.logprobs`` holds the server's per-token logprobs; ``token_ids`` and
``top_logprobs`` (keyed by token id) only from vLLM (``return_tokens_as_token_ids``). Other
servers give logprobs with empty ``token_ids``, and refuse ``logprobs > 0`` (CapabilityError).

**Deadline.** ``timeout`` bounds a whole call -- queueing for a connection slot, every attempt and
every backoff -- not each attempt: a hanging server fails the call's outstanding samples as
``timeout`` at ``timeout`` seconds, with their connections closed. ``max_concurrency`` bounds the
requests in flight across all calls of this generator. The request loop is the shared
:class:`~metagen.generators.http_client.HTTPClient` (the remote reward models use it too).

**Usage.** ``prompt_tokens`` counts each prompt once (the largest count the server reported for
its samples), ``generated_tokens`` the sum of the server's ``completion_tokens``; ``calls`` is 1
per call. ``generator_flops`` is ``2 * num_params * tokens`` when ``num_params`` was declared, else
NaN (unknown, never 0); a response without ``usage`` leaves its tokens uncounted, makes the call's
FLOPs NaN and is counted in :attr:`OpenAIGenerator.missing_usage`.

**Threads and loops.** All I/O runs on a private event loop thread owned by the generator; the
sync faces block on it, the async faces await it from any loop (cancelling the awaiting task
cancels the call's outstanding requests). The API key is sent as a bearer header only and is
redacted from every error message.

**Streaming.** ``stream`` / ``astream`` yield the text deltas of one completion (server-sent
events); see :meth:`OpenAIGenerator.stream` for which failures are retried.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from metagen.errors import (
    BackendError,
    BackendTimeout,
    CapabilityError,
    InvalidParameterError,
    InvalidPromptError,
    InvalidRequest,
)
from metagen.generators.base import Capabilities, Prompt, check_prompts
from metagen.generators.http_client import HTTPClient, all_or_none, check_http_options
from metagen.generators.openai_retry import RetryPolicy, is_retryable
from metagen.generators.openai_stream import StreamState, parse_sse_line
from metagen.generators.openai_wire import (
    CHAT,
    COMPLETIONS,
    Dialect,
    Parsed,
    build_request,
    build_score_request,
    check_prompt,
    check_supported,
    dialect_from_models,
    parse_response,
    parse_token_logprobs,
)
from metagen.types import Completion, SamplingParams, Usage

log = logging.getLogger("metagen.openai")
FATAL_STATUS = frozenset({401, 403, 404})
_END = object()  # the end of a stream's queue


@dataclass(slots=True, frozen=True)
class SampleResult:
    """The outcome of one sample: ``completion`` (a failed one has ``finish_reason="error"`` and
    ``stop_reason=outcome``), the typed ``error`` (None when ok) and the ``attempts`` made."""

    index: int
    outcome: str
    completion: Completion
    error: BackendError | None = None
    attempts: int = 0
    parsed: Parsed | None = None


class OpenAIGenerator:
    """Generator over an OpenAI-compatible HTTP server. See the module docstring.

    ``base_url`` is the API root (``http://127.0.0.1:8000/v1``; ``/v1`` is appended when the URL
    has no path). ``dialect`` (``openai``, ``vllm``, ``metagen``, ``sglang``, ``llamacpp``,
    ``llamacpp-python``) selects the sampling extensions sent; None probes ``GET /models`` once
    (its ``owned_by``; llama-cpp-python's by the answer's shape) and falls back to standard
    fields only. ``backoff_base`` / ``backoff_cap`` / ``max_retry_after`` tune the retry policy
    (:class:`~metagen.generators.openai_retry.RetryPolicy`); ``num_params`` (the model's
    parameter count) makes FLOPs known.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *,
                 max_concurrency: int = 16, timeout: float = 60.0, max_retries: int = 3,
                 backoff_base: float = 0.5, backoff_cap: float = 8.0,
                 max_retry_after: float = 30.0, connect_timeout: float = 10.0,
                 num_params: int | None = None, dialect: str | None = None) -> None:
        check_http_options(base_url, max_concurrency, timeout, connect_timeout)
        if not isinstance(model, str) or not model:
            raise InvalidParameterError("model", model, "must be a non-empty string")
        if num_params is not None and (not isinstance(num_params, int) or num_params <= 0):
            raise InvalidParameterError("num_params", num_params, "must be a positive int or None")
        self.policy = RetryPolicy(max_retries, backoff_base, backoff_cap, max_retry_after)
        self._dialect = None if dialect is None else Dialect(dialect)
        url = base_url.rstrip("/")
        self.base_url = url if urlparse(url).path else url + "/v1"
        self.model = model
        self.timeout = float(timeout)
        self.num_params = num_params
        self.max_concurrency = max_concurrency
        self.missing_usage = 0
        self._api_key = api_key
        self._usage = Usage()
        self._lock = threading.Lock()
        self._http = HTTPClient(self.base_url, api_key, policy=self.policy,
                                max_concurrency=max_concurrency, timeout=timeout,
                                connect_timeout=connect_timeout, name="metagen.openai")
        self._loop = self._http.loop

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIGenerator({self.base_url!r}, {self.model!r})"

    # --- protocol faces -------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        """Top-k logprobs need token ids and ``score`` a prompt-only echo (both vLLM only);
        seeds are honoured by vLLM, SGLang and llama.cpp (not by OpenAI); FLOPs are known only
        with a declared ``num_params``. Probes the server when the dialect is not known yet."""
        dialect = self.dialect
        return Capabilities(logits=False, logprobs=dialect.token_ids,
                            prompt_scoring=dialect.wire == "vllm",
                            prefix_cache=False, constraints=False, seeded=dialect.seeded,
                            flops=self.num_params is not None, thread_safe=True)

    @property
    def dialect(self) -> Dialect:
        """The server's dialect (probed on first use when not given)."""
        return self._dialect or self._loop.run(self._probe())

    @property
    def usage(self) -> Usage:
        """Cumulative usage of every call so far (see the module docstring)."""
        return self._usage

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` completions in sample order; failed samples are
        error completions (see the module docstring). Raises ``InvalidParameterError`` /
        ``CapabilityError`` before any generation request, ``InvalidRequest`` on 401/403/404."""
        return _completions(self._loop.run(self._generate(prompts, params)))

    async def agenerate(self, prompts: Sequence[Prompt], params: SamplingParams
                        ) -> list[list[Completion]]:
        """:meth:`generate` for asyncio callers; cancelling the awaiting task cancels the
        call's outstanding requests."""
        return _completions(await self.agenerate_samples(prompts, params))

    def generate_samples(self, prompts: Sequence[Prompt], params: SamplingParams
                         ) -> list[list[SampleResult]]:
        """Like :meth:`generate`, with each sample's outcome, typed error and attempt count."""
        return self._loop.run(self._generate(prompts, params))

    async def agenerate_samples(self, prompts: Sequence[Prompt], params: SamplingParams
                                ) -> list[list[SampleResult]]:
        """:meth:`generate_samples` for asyncio callers."""
        return await asyncio.wrap_future(self._loop.submit(self._generate(prompts, params)))

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        """Text deltas of the single completion of ``prompt`` (``params.n`` must be 1), streamed
        (server-sent events). A failure before the first delta is retried like any request;
        after it, it is raised (``TruncatedStream`` for a stream that ends without its finish
        reason, the typed error of an in-stream error event, ``BackendTimeout`` at the call's
        deadline). Stopping the iteration early closes the request."""
        items: queue.Queue[Any] = queue.Queue()
        future = self._loop.submit(self._stream(prompt, params, items.put))
        future.add_done_callback(lambda _: items.put(_END))
        try:
            while (item := items.get()) is not _END:
                yield item
            future.result()
        finally:
            future.cancel()

    async def astream(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[str]:
        """:meth:`stream` for asyncio callers."""
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[Any] = asyncio.Queue()

        def put(item: Any) -> None:
            try:
                loop.call_soon_threadsafe(items.put_nowait, item)
            except RuntimeError:  # the caller's loop is closed: nobody is listening
                pass

        future = self._loop.submit(self._stream(prompt, params, put))
        future.add_done_callback(lambda _: put(_END))
        try:
            while (item := await items.get()) is not _END:
                yield item
            future.result()
        finally:
            future.cancel()

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j]`` = log p(continuations[i][j] | prompts[i]), summed over the tokens of
        ``prompt + continuation`` that end after the prompt (a token merging across the boundary
        is scored); an empty continuation scores 0 without a request. One echo request
        (``/completions``, ``echo``, ``logprobs=0``, ``max_tokens=0``) per continuation, under
        the same retry policy and deadline as ``generate``; a continuation that still fails
        raises its typed error (a failed score is never a score). Needs capability
        ``prompt_scoring`` (vLLM) and string prompts. Counted as ``scorer_tokens`` /
        ``scorer_calls`` / ``scorer_flops``."""
        return self._loop.run(self._score(prompts, continuations))

    async def ascore(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
                     ) -> list[list[float]]:
        """:meth:`score` for asyncio callers."""
        return await asyncio.wrap_future(self._loop.submit(self._score(prompts, continuations)))

    def close(self) -> None:
        """Close the connections and stop the loop thread; idempotent."""
        self._http.close()

    def __enter__(self) -> OpenAIGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- on the private loop -----------------------------------------------------------------

    async def _probe(self) -> Dialect:
        """``GET /models`` under the retry policy, once per generator: the answer fixes the
        dialect. A server that answers without a usable model list (a 4xx, a body that is not
        JSON) is taken as plain ``openai``; one that cannot be reached (refused, reset, 5xx, the
        deadline) raises that typed error -- never a silent switch to standard fields, which on
        a llama.cpp server would mean its own sampling defaults."""
        data, error, _ = await self._http.retrying("/models", None, lambda d: d,
                                                   self._http.deadline(), "dialect probe")
        if error is not None and (is_retryable(error) or isinstance(error, BackendTimeout)):
            raise error
        if error is not None:
            log.warning("dialect probe of %s: %s; sending standard fields only",
                        self.base_url, error)
        self._dialect = dialect_from_models(data)
        return self._dialect

    async def _generate(self, prompts: Sequence[Prompt], params: SamplingParams
                        ) -> list[list[SampleResult]]:
        start = time.perf_counter()
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        plist = check_prompts(prompts)
        dialect = self._dialect or await self._probe()
        check_supported(params, dialect)
        for prompt in plist:
            check_prompt(prompt, dialect)
        deadline = self._http.deadline()
        tasks = [[asyncio.ensure_future(self._sample(p, params, j, dialect, deadline))
                  for j in range(params.n)] for p in plist]
        await all_or_none([t for row in tasks for t in row])
        rows = [[t.result() for t in row] for row in tasks]
        self._account(rows, start)
        for row in rows:
            for s in row:
                if isinstance(s.error, InvalidRequest) and s.error.status in FATAL_STATUS:
                    raise s.error
        return rows

    async def _sample(self, prompt: Prompt, params: SamplingParams, index: int,
                      dialect: Dialect, deadline: float) -> SampleResult:
        path, body = build_request(self.model, prompt, params, index, dialect)
        want_lp = params.logprobs is not None
        parsed, error, attempts = await self._http.retrying(
            path, body, lambda data: parse_response(data, path == CHAT, want_lp, params.stop),
            deadline, f"sample {index}")
        if error is None and parsed is not None:
            return SampleResult(index, "ok", parsed.completion, None, attempts, parsed)
        assert error is not None
        failed = Completion(text="", finish_reason="error", stop_reason=error.outcome)
        return SampleResult(index, error.outcome, failed, error, attempts)

    async def _stream(self, prompt: Prompt, params: SamplingParams,
                      put: Callable[[str], None]) -> None:
        start = time.perf_counter()
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        if params.n != 1:
            raise InvalidParameterError("n", params.n, "stream() streams one completion; use n=1")
        [prompt] = check_prompts([prompt])
        dialect = self._dialect or await self._probe()
        check_supported(params, dialect)
        check_prompt(prompt, dialect)
        if params.logprobs is not None:
            raise CapabilityError("stream() does not return logprobs; use generate()")
        path, body = build_request(self.model, prompt, params, 0, dialect)
        body.update(stream=True, stream_options={"include_usage": True})
        loop = asyncio.get_running_loop()
        deadline = self._http.deadline()
        state = StreamState(chat=path == CHAT)
        attempts = 0
        try:
            while True:
                attempts += 1
                try:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise asyncio.TimeoutError
                    await asyncio.wait_for(self._stream_attempt(path, body, state, put), remaining)
                    return
                except asyncio.TimeoutError:
                    raise BackendTimeout(f"the stream did not finish within the call's "
                                         f"{self.timeout:g}s deadline") from None
                except BackendError as error:
                    delay = None if state.emitted else \
                        self.policy.delay(error, attempts - 1, self._http.rng)
                    if delay is None or loop.time() + delay > deadline:
                        raise
                    log.info("%s stream attempt %d failed (%s); retrying in %.2fs",
                             path, attempts, error, delay)
                    await asyncio.sleep(delay)
        finally:
            self._account_stream(state, start)

    async def _stream_attempt(self, path: str, body: dict[str, Any], state: StreamState,
                              put: Callable[[str], None]) -> None:
        async with self._http.stream_lines(path, body) as lines:
            async for line in lines:
                chunk = parse_sse_line(line)
                if chunk is not None:
                    text = state.feed(chunk, self._api_key)
                    if text:
                        put(text)
        state.check_complete()

    def _account_stream(self, state: StreamState, start: float) -> None:
        known = state.prompt_tokens is not None and state.completion_tokens is not None
        tokens = (state.prompt_tokens or 0) + (state.completion_tokens or 0)
        flops = 2.0 * self.num_params * tokens if known and self.num_params else math.nan
        call = Usage(prompt_tokens=state.prompt_tokens or 0,
                     generated_tokens=state.completion_tokens or 0, calls=1,
                     generator_flops=flops, wall_time=time.perf_counter() - start)
        with self._lock:
            self._usage = self._usage + call
            self.missing_usage += not known

    async def _score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
                     ) -> list[list[float]]:
        plist = check_prompts(prompts)
        if isinstance(continuations, (str, bytes)) or not isinstance(continuations, Sequence) \
                or len(continuations) != len(plist):
            raise InvalidParameterError("continuations", continuations,
                                        f"need one list of strings per prompt ({len(plist)})")
        for prompt, conts in zip(plist, continuations):
            _check_text_prompt(prompt)
            if isinstance(conts, (str, bytes)) or not isinstance(conts, Sequence) \
                    or not all(isinstance(c, str) for c in conts):
                raise InvalidParameterError("continuations", conts,
                                            "each item must be a list of strings")
        pairs = [(str(p), c) for p, conts in zip(plist, continuations) for c in conts if c]
        values = iter(await self._echo(pairs))
        return [[sum(next(values)) if c else 0.0 for c in conts] for conts in continuations]

    def token_logprobs(self, prompts: Sequence[Prompt], continuations: Sequence[str]
                       ) -> list[list[float]]:
        """Per pair, the log-probs of ``continuations[i]``'s tokens after ``prompts[i]`` (the
        tokens of ``prompt + continuation`` that end after the prompt), from one echo request
        each, as :meth:`score` sends them and under the same rules (string prompts, non-empty
        continuations, capability ``prompt_scoring``, counted as scorer usage)."""
        plist = check_prompts(prompts)
        if len(continuations) != len(plist) or not all(
                isinstance(c, str) and c for c in continuations):
            raise InvalidParameterError("continuations", continuations,
                                        f"need one non-empty string per prompt ({len(plist)})")
        for prompt in plist:
            _check_text_prompt(prompt)
        return self._loop.run(self._echo([(str(p), c) for p, c in zip(plist, continuations)]))

    async def _echo(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """The continuation token log-probs of each (prompt, continuation), one echo request
        each, all or none; counted as one scorer call."""
        start = time.perf_counter()
        dialect = self._dialect or await self._probe()
        if dialect.wire != "vllm":
            raise CapabilityError(f"a {dialect.name!r} server cannot score prompts (needs "
                                  "prompt-only echo with logprobs: vLLM)")
        deadline = self._http.deadline()
        jobs = [asyncio.ensure_future(self._echo_one(p, c, deadline)) for p, c in pairs]
        try:
            await all_or_none(jobs)
        finally:
            done = [t.result() for t in jobs if t.done() and not t.cancelled()
                    and t.exception() is None]
            tokens = sum(n or 0 for _, n in done)
            unknown = self.num_params is None or any(n is None for _, n in done)
            flops = math.nan if unknown else 2.0 * float(self.num_params or 0) * tokens
            call = Usage(scorer_tokens=tokens, scorer_calls=1, scorer_flops=flops,
                         wall_time=time.perf_counter() - start)
            with self._lock:
                self._usage = self._usage + call
        return [t.result()[0] for t in jobs]

    async def _echo_one(self, prompt: str, continuation: str, deadline: float
                        ) -> tuple[list[float], int | None]:
        body = build_score_request(self.model, prompt, continuation)
        total = len(prompt) + len(continuation)
        return await self._http.post_json(
            COMPLETIONS, body, lambda data: parse_token_logprobs(data, len(prompt), total),
            deadline=deadline, what="score")

    def _account(self, rows: list[list[SampleResult]], start: float) -> None:
        prompt_tokens = generated = missing = 0
        for row in rows:
            counts = [s.parsed for s in row if s.parsed is not None]
            prompt_tokens += max((p.prompt_tokens or 0 for p in counts), default=0)
            generated += sum(p.completion_tokens or 0 for p in counts)
            missing += sum(p.prompt_tokens is None or p.completion_tokens is None for p in counts)
        flops = math.nan if self.num_params is None or missing \
            else 2.0 * self.num_params * (prompt_tokens + generated)
        call = Usage(prompt_tokens=prompt_tokens, generated_tokens=generated, calls=1,
                     generator_flops=flops, wall_time=time.perf_counter() - start)
        with self._lock:
            self._usage = self._usage + call
            self.missing_usage += missing


def _check_text_prompt(prompt: Prompt) -> None:
    if not isinstance(prompt, str):
        raise InvalidPromptError("prompt", "<chat messages>", "score() over the wire "
                                 "takes string prompts (render the chat template first)")


def _completions(rows: list[list[SampleResult]]) -> list[list[Completion]]:
    return [[s.completion for s in row] for row in rows]
