"""``create_app``: the OpenAI-compatible HTTP server over a :class:`Backend`.

Routes: ``GET /health`` (200, or 503 once the engine has stopped; the only route without the API
key), ``GET /metrics`` (Prometheus text), ``GET /v1/models``, ``POST /v1/completions``,
``POST /v1/chat/completions`` (``stream: true`` for server-sent events), over the loaded
reward models ``POST /pooling`` (vLLM's shape) and ``POST /score`` (metagen's JSON contract; both
in :mod:`metagen.server.scoring`), and vLLM's ``POST /tokenize``, ``POST /detokenize``,
``GET /tokenizer_info`` (:mod:`metagen.server.tokenization`) and ``GET /version``. Which of
vLLM's fields and routes are served is one table, :mod:`metagen.server.vllm_compat`. No docs or
OpenAPI
routes. Every error is an OpenAI-style body (:mod:`metagen.server.errors`): a bad field is a 400
naming it, never a 422 or 500.

Concurrency and failure are per request: all requests share the engine's steps through its loop;
a client that disconnects (streaming or not) has its requests aborted and their KV blocks freed;
a bad request fails alone. ``/v1/models`` reports ``owned_by: "metagen (vllm-compatible)"``: the
server speaks vLLM's extensions (``return_tokens_as_token_ids``, echo with prompt logprobs,
``continue_final_message``), so clients that detect vLLM (metagen's ``OpenAIGenerator``) use them.
A ``metagen`` object in a body runs a strategy (:mod:`metagen.server.strategy`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive

from metagen.engine.outputs import PromptLogprobs
from metagen._version import __version__
from metagen.errors import EngineDeadError, InvalidParameterError
from metagen.generators.base import Prompt, render_prompt
from metagen.generators.tokenize import decode_ids
from metagen.scorers.base import RewardModel
from metagen.server.backend import Backend
from metagen.server.body import parse_body, read_capped
from metagen.server.cancellation import Cancellation
from metagen.server.config import ServerConfig
from metagen.server.errors import ApiError, api_error, bad_request, error_response
from metagen.server.guard import Guard, ServerState
from metagen.server.requests import (
    GenerationRequest,
    chat_request,
    check_model,
    completion_request,
)
from metagen.server.responses import chat_response, check_outputs, completion_response, usage
from metagen.server.scoring import ScoringRoutes
from metagen.server.strategy import StrategyRunner, strategy_response
from metagen.server.strategy_errors import request_error
from metagen.server.strategy_params import parse_strategy
from metagen.server.strategy_stream import strategy_events
from metagen.server.streaming import sse_events
from metagen.server.tokenization import detokenize, tokenize, tokenizer_info
from metagen.server.vllm_compat import unsupported
from metagen.types import Usage

OWNED_BY = "metagen (vllm-compatible)"


def create_app(backend: Backend, config: ServerConfig,
               rewards: Mapping[str, RewardModel] | None = None,
               prms: Mapping[str, Any] | None = None) -> FastAPI:
    """The ASGI app serving ``backend`` under ``config`` (see the module docstring);
    ``rewards`` (ORMs) and ``prms`` are the reward models strategy requests may name."""
    app = FastAPI(title="metagen", docs_url=None, redoc_url=None, openapi_url=None)
    state = ServerState(config)
    app.state.server = state
    app.add_middleware(Guard, state=state)
    _handlers(app)
    created = int(time.time())
    routes = _Routes(backend, state, StrategyRunner(backend.generator, rewards or {}, prms))
    scoring = ScoringRoutes(rewards or {}, prms or {})

    async def body_of(request: Request) -> dict[str, Any]:
        return parse_body(await read_capped(request.stream(), config.max_body_bytes),
                          config.max_json_depth)

    @app.get("/health")
    async def health() -> Response:
        if not backend.alive:
            return error_response(ApiError(503, "the engine has stopped", code="engine_dead"))
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def metrics() -> Response:
        try:
            snapshot = await backend.stats()
        except (EngineDeadError, TimeoutError):
            snapshot = None
        return PlainTextResponse(state.metrics.render(snapshot, state.in_flight),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": config.model_name, "object": "model", "created": created,
             "owned_by": OWNED_BY, "max_model_len": backend.max_model_len}]})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await routes.generate(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await routes.generate(request, chat=True)

    @app.post("/pooling")
    async def pooling(request: Request) -> Response:
        return await _unless_gone(request, scoring.pooling(await body_of(request)))

    @app.post("/score")
    async def score(request: Request) -> Response:
        return await _unless_gone(request, scoring.score(await body_of(request)))

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> Response:
        return JSONResponse(tokenize(await body_of(request), backend.tokenizer,
                                     backend.max_model_len, config.model_name,
                                     config.max_messages))

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> Response:
        return JSONResponse(detokenize(await body_of(request), backend.tokenizer,
                                       config.model_name))

    @app.get("/tokenizer_info")
    async def tokenizer_info_route() -> Response:
        return JSONResponse(tokenizer_info(backend.tokenizer, backend.max_model_len))

    @app.get("/version")
    async def version() -> Response:
        return JSONResponse({"version": __version__})

    return app


def _handlers(app: FastAPI) -> None:
    async def on_api_error(request: Request, exc: Exception) -> Response:
        return error_response(api_error(exc))

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return error_response(ApiError(exc.status_code, str(exc.detail)[:200]))

    async def on_validation(request: Request, exc: Exception) -> Response:
        return error_response(bad_request(None, "invalid request"))

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(HTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)


class _Routes:
    """The two generation routes."""

    def __init__(self, backend: Backend, state: ServerState, strategies: StrategyRunner
                 ) -> None:
        self.backend, self.state, self.strategies = backend, state, strategies

    async def generate(self, request: Request, chat: bool) -> Response:
        cfg = self.state.config
        body = parse_body(await read_capped(request.stream(), cfg.max_body_bytes),
                          cfg.max_json_depth)
        check_model(body, cfg.model_name)
        tok = self.backend.tokenizer
        req = (chat_request(body, tok, self.backend.max_model_len, cfg.max_messages) if chat
               else completion_request(body, tok, cfg.max_prompts, self.backend.max_model_len))
        self._validate(req)
        if "metagen" in body and body["metagen"] is not None:
            return await self._strategy(req, body, request)
        if req.stream:
            reads = None
            if req.prompt_top is not None:  # read before the stream starts: errors are 4xx
                reads = await _unless_gone(request, self._read_prompts(req), respond=False)
                if isinstance(reads, Response):
                    return reads
            handle = self.backend.asubmit(req.prompts, req.params, stream=True,
                                          first_sample=req.first_sample)
            return StreamingResponse(sse_events(req, handle, cfg.model_name,
                                                self.state.metrics.add_tokens, reads,
                                                self.backend.tokenizer),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _unless_gone(request, self._complete(req))

    def _validate(self, req: GenerationRequest) -> None:
        """Every prompt against the model, before any work; token-id prompts get their text."""
        for p, ids in enumerate(req.prompts):
            try:
                self.backend.validate(ids, req.run_params)
            except InvalidParameterError as exc:
                wire = (req.wire_names or {}).get(exc.param or "")
                raise (ApiError(400, str(exc), param=wire) if wire else api_error(exc)) from None
            if not req.prompt_texts[p]:
                req.prompt_texts[p] = decode_ids(self.backend.tokenizer, ids)

    async def _strategy(self, req: GenerationRequest, body: Mapping[str, Any],
                        request: Request) -> Response:
        for name in ("use_beam_search", "chat_template_kwargs", "truncate_prompt_tokens",
                     "skip_special_tokens", "add_special_tokens"):
            if body.get(name) is not None:
                raise unsupported(name, "this field with a metagen strategy (the strategy "
                                  "renders and decodes as the library does)")
        sreq = parse_strategy(body["metagen"], self.strategies.rewards, self.strategies.prms)
        if req.params.n != 1:
            raise bad_request("n", "with metagen, n must be 1: the strategy's samples are "
                              "metagen.n")
        if req.echo:
            raise bad_request("echo", "strategy requests do not echo the prompt")
        if req.prompt_logprobs is not None:
            raise bad_request("prompt_logprobs", "strategy requests do not return prompt "
                              "logprobs")
        prompt: Prompt
        if req.chat:
            assert req.messages is not None
            prompt = req.messages
            if render_prompt(self.backend.tokenizer, prompt) != req.prompt_texts[0]:
                raise bad_request("add_generation_prompt", "strategy requests answer a "
                                  "conversation (add_generation_prompt) or continue its final "
                                  "assistant message (continue_final_message), as the library")
        else:
            if not isinstance(body.get("prompt"), str):
                raise bad_request("prompt", "a strategy request takes one text prompt")
            prompt = req.prompt_texts[0]
        await self.strategies.check(sreq, prompt, req)

        async def answer(cancelled: threading.Event,
                         progress: Callable[[Usage], None] | None = None) -> dict[str, Any]:
            try:
                result = await self.strategies.run(sreq, prompt, req.params, cancelled, progress)
            except asyncio.CancelledError:
                cancelled.set()  # the client left: abort its call in flight, stop the strategy
                raise
            except InvalidParameterError as exc:  # the request's parameters, refused inside
                raise request_error(exc, sreq, req) from None
            u = result.usage
            self.state.metrics.add_tokens(u.prompt_tokens, u.generated_tokens)
            return strategy_response(req, sreq, result, self.backend.tokenizer,
                                     self.state.config.model_name)

        if req.stream:
            return StreamingResponse(strategy_events(req, self.state.config.model_name, answer),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await _unless_gone(request, answer(Cancellation()))

    async def _read_prompts(self, req: GenerationRequest) -> list[PromptLogprobs] | None:
        """How the model reads each prompt, when the answer shows it (echo with logprobs,
        ``prompt_logprobs``); else None."""
        if req.prompt_top is None:
            return None
        return list(await asyncio.gather(*(self.backend.aprompt_logprobs(ids, req.prompt_top)
                                           for ids in req.prompts)))

    async def _complete(self, req: GenerationRequest) -> dict[str, Any]:
        prompt_lps = await self._read_prompts(req)
        outs = None
        if req.generate:
            outs = await self.backend.asubmit(req.prompts, req.run_params,
                                              first_sample=req.first_sample).aresult()
            check_outputs(outs)
        counts = usage(req, outs)
        self.state.metrics.add_tokens(counts["prompt_tokens"], counts["completion_tokens"])
        tok, model = self.backend.tokenizer, self.state.config.model_name
        if req.chat:
            assert outs is not None
            return chat_response(req, outs, prompt_lps, tok, model)
        return completion_response(req, outs, prompt_lps, tok, model)


async def _unless_gone(request: Request, coro: Coroutine[Any, Any, Any], respond: bool = True
                       ) -> Any:
    """The JSON answer ``coro`` computes (its value itself with ``respond=False``), or a 499
    response when the client leaves first (``coro`` is then cancelled: a departed client's
    requests are aborted)."""
    work = asyncio.ensure_future(coro)
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, gone):
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
    if not work.done() or work.cancelled():
        return Response(status_code=499)  # nobody is listening
    return JSONResponse(work.result()) if respond else work.result()


async def _disconnected(receive: Receive) -> None:
    """Returns when the client has gone (the body was already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
