"""LocalGenerator: the Generator protocol over metagen's built-in engine (the default backend).

``generate(prompts, params)`` tokenizes every prompt, validates every request against the model
(before any work), hands them to the engine loop (:mod:`metagen.engine.loop`) and waits for them:
prompts share the running batch and the radix prefix cache with each other and with every other
caller's requests, and ``n > 1`` samples are forked from one prefill. A sample whose logits turn
NaN/inf ends with ``finish_reason="error"`` and ``stop_reason="numerical_error"``; the other
samples are unaffected.

Safe to call from many threads and asyncio tasks at once (``agenerate``, ``astream``,
``ascore``): one loop thread owns the engine; a caller that is interrupted, times out or raises
aborts only its own requests, and the next call works. A request's output does not depend on
what it was batched with, within the engine's batch-composition guarantee
(:mod:`metagen.engine.llm_engine`: float32 rounding; bit for bit with ``deterministic=True``).

``generate_metered(prompts, params, allowance)`` keeps a call within an
:class:`~metagen.allowance.Allowance` (token pool, FLOPs, deadline), enforced by the engine loop
between steps, and returns each prompt's own usage (:mod:`metagen.generators.metered`).

Usage per call (counted from the call's own requests, so concurrent calls don't mix):
``prompt_tokens`` counts each prompt once per request (``n`` samples share one
prefill), ``cached_prompt_tokens`` those served from the prefix cache, ``generated_tokens`` every
sampled token, ``generator_flops`` = 2 x params x tokens computed + attention (recomputation after
preemption included). ``score`` is counted as ``scorer_tokens`` / ``scorer_calls`` /
``scorer_flops``, as the transformers backend does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from metagen.allowance import Allowance, token_room
from metagen.beam_params import BeamSearchParams
from metagen.engine.allowance_guard import AllowanceGuard
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine, LogitsHook
from metagen.engine.loop import EngineLoop, RequestHandle
from metagen.engine.outputs import PromptLogprobs, RequestOutput
from metagen.engine.validation import check_first_sample
from metagen.errors import InvalidParameterError, ModelLoadError, NumericalError
from metagen.generators.base import Capabilities, Prompt, check_prompts, render_prompt
from metagen.generators.flops import FlopModel
from metagen.generators.metered import MeteredCall, nothing_run, padded, share_call
from metagen.generators.tokenize import check_fits_context, encode_prompt, scored_sequence
from metagen.types import MAX_LOGPROBS, Completion, SamplingParams, Usage


class LocalGenerator:
    """Generator over :class:`~metagen.engine.llm_engine.LLMEngine` (needs its tokenizer)."""

    def __init__(self, engine: LLMEngine, logits_hook: LogitsHook | None = None) -> None:
        if engine.tokenizer is None:
            raise ModelLoadError("LocalGenerator needs an engine with a tokenizer")
        self.engine = engine
        self.tokenizer = engine.tokenizer
        engine.logits_hook = logits_hook
        self.loop = EngineLoop(engine)
        self._usage = Usage()
        self._usage_lock = threading.Lock()

    @classmethod
    def from_pretrained(cls, path: str | Path, **engine_options: Any) -> LocalGenerator:
        """Load a Hugging Face folder; ``engine_options`` are :class:`EngineConfig` fields
        (``num_blocks``/``kv_cache_bytes``, ``dtype``, ``device``, ``max_num_seqs``, ...;
        speculative decoding: ``speculative_model=PATH`` (its weights in int8 with
        ``speculative_quantization="int8"``; a token tree of drafts with
        ``speculative_tree=(2, 1)``) or ``prompt_lookup=N``, with ``num_speculative_tokens=K``).
        An unsupported architecture raises ``ModelLoadError`` suggesting ``metagen.HFGenerator``."""
        folder = Path(path)
        if not (folder / "config.json").is_file():
            raise ModelLoadError(f"no model folder at {str(path)!r} (config.json not found)")
        engine = LLMEngine.from_pretrained(folder, EngineConfig(**engine_options))
        if engine.tokenizer is None:
            raise ModelLoadError(f"no tokenizer in {folder}")
        return cls(engine)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(logits=True, logprobs=True, prompt_scoring=True,
                            prefix_cache=self.engine.radix is not None, constraints=True,
                            seeded=True, thread_safe=True)  # one loop thread owns the engine

    @property
    def usage(self) -> Usage:
        """Cumulative usage of every call so far (see the module docstring)."""
        return self._usage

    @property
    def logits_hook(self) -> LogitsHook | None:
        return self.engine.logits_hook

    @logits_hook.setter
    def logits_hook(self, hook: LogitsHook | None) -> None:
        self.engine.logits_hook = hook

    def _encode_all(self, prompts: Sequence[Prompt], params: Any,
                    kind: type[SamplingParams | BeamSearchParams] = SamplingParams
                    ) -> list[list[int]]:
        """The prompts' token ids, each request validated against the model before any work;
        a prompt that does not fit the context with ``params.max_tokens`` raises
        ``InvalidPromptError`` (as the transformers backend does)."""
        if not isinstance(params, kind):
            raise InvalidParameterError("params", params, f"must be a {kind.__name__}")
        ids = [encode_prompt(self.tokenizer, p) for p in check_prompts(prompts)]
        for p in ids:  # a prompt that cannot fit is the prompt's fault (one item, not the run)
            check_fits_context(p, params.max_tokens, self.engine.max_model_len,
                               self.engine.context_limit)
            self.engine.validate(p, params)
        return ids

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams, *,
                 timeout: float | None = None) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` completions. The prompts run as one batch,
        alongside every other caller's requests. ``timeout`` (seconds) aborts them and raises
        ``TimeoutError``; so does any exception while waiting (``KeyboardInterrupt``)."""
        start = time.perf_counter()
        ids = self._encode_all(prompts, params)
        outs = self.loop.submit(_adder(ids, params)).result(timeout)
        return self._completions(outs, start)

    def generate_metered(self, prompts: Sequence[Prompt], params: SamplingParams,
                         allowance: Allowance | None = None, *,
                         timeout: float | None = None) -> MeteredCall:
        """:meth:`generate` within ``allowance``, enforced between the engine's steps, with
        each prompt's usage (:mod:`metagen.generators.metered`). The FLOP allowance becomes a
        token pool before the call (:func:`~metagen.allowance.token_room`): each prompt's
        prefill as if nothing were cached (its ``n`` samples share it), then every token at the
        longest context of the call (prompt + ``max_tokens``). When the pool holds no token or
        the deadline has passed, nothing runs (:func:`~metagen.generators.metered.nothing_run`).
        """
        start = time.perf_counter()
        ids = self._encode_all(prompts, params)
        guard = None
        if allowance is not None and not allowance.unlimited:
            pool = self._token_pool(ids, params, allowance)
            if allowance.expired() or (pool is not None and pool < 1):
                return nothing_run(len(ids), params.n)
            guard = AllowanceGuard(allowance, pool)
        outs = self.loop.submit(_adder(ids, params), guard=guard).result(timeout)
        own = [Usage(prompt_tokens=len(o.prompt_ids), cached_prompt_tokens=o.num_cached_tokens,
                     generated_tokens=o.generated_tokens, generator_flops=o.flops)
               for o in outs]
        usage = share_call(own, 1, time.perf_counter() - start)
        self._add_usage(sum(usage, Usage()))
        rows = [padded([self._mark_error(c, e) for c, e in zip(o.outputs, o.errors)], params.n)
                for o in outs]
        return MeteredCall(rows, usage)

    def _token_pool(self, ids: list[list[int]], params: SamplingParams, allowance: Allowance
                    ) -> int | None:
        """The call's token pool: the allowance's tokens, or fewer when its FLOPs pay for
        fewer (see :meth:`generate_metered`); ``None`` when neither is limited."""
        pool = allowance.generated_tokens
        if allowance.flops is None:
            return pool
        mc = self.engine.model.cfg
        model = FlopModel(mc.num_params, mc.num_layers, mc.num_heads * mc.head_dim)
        prefill = sum(model.forward(0, len(p)) for p in ids)
        longest = max(len(p) for p in ids) + params.max_tokens
        room = token_room(allowance.flops, prefill, model.forward(longest - 1, 1))
        return room if pool is None else min(pool, room)

    def beam_search(self, prompts: Sequence[Prompt], params: BeamSearchParams, *,
                    timeout: float | None = None) -> list[list[Completion]]:
        """Beam search (plain, diverse or stochastic) for each prompt, run by the engine loop
        alongside every other request: ``params.num_return_sequences`` hypotheses per prompt,
        best first (``cumulative_logprob`` is the beam score; see
        :mod:`metagen.engine.beam_search`). Validates every prompt first."""
        start = time.perf_counter()
        ids = self._encode_all(prompts, params, BeamSearchParams)
        outs = self.loop.submit(_adder(ids, params)).result(timeout)
        return self._completions(outs, start)

    async def agenerate(self, prompts: Sequence[Prompt], params: SamplingParams
                        ) -> list[list[Completion]]:
        """:meth:`generate` for asyncio callers; cancelling the awaiting task aborts."""
        start = time.perf_counter()
        ids = self._encode_all(prompts, params)
        outs = await self.loop.submit(_adder(ids, params), aio=True).aresult()
        return self._completions(outs, start)

    def _completions(self, outs: list[RequestOutput], start: float) -> list[list[Completion]]:
        self._account(outs, start)
        return [[self._mark_error(c, e) for c, e in zip(o.outputs, o.errors)] for o in outs]

    def _account(self, outs: Sequence[RequestOutput], start: float, scoring: bool = False
                 ) -> None:
        """Add one call's usage, counted from its own requests (not other callers')."""
        flops = sum(o.flops for o in outs)
        if scoring:
            call = Usage(scorer_tokens=sum(o.computed_tokens for o in outs), scorer_calls=1,
                         scorer_flops=flops, wall_time=time.perf_counter() - start)
        else:
            call = Usage(prompt_tokens=sum(len(o.prompt_ids) for o in outs),
                         cached_prompt_tokens=sum(o.num_cached_tokens for o in outs),
                         generated_tokens=sum(o.generated_tokens for o in outs), calls=1,
                         generator_flops=flops, wall_time=time.perf_counter() - start)
        self._add_usage(call)

    def _add_usage(self, call: Usage) -> None:
        with self._usage_lock:
            self._usage = self._usage + call

    @staticmethod
    def _mark_error(c: Completion, error: Exception | None) -> Completion:
        if error is None:
            return c
        reason = "numerical_error" if isinstance(error, NumericalError) else type(error).__name__
        return replace(c, finish_reason="error", stop_reason=reason)

    def _stream_handle(self, prompt: Prompt, params: SamplingParams, aio: bool) -> RequestHandle:
        if params.n != 1:
            raise InvalidParameterError("n", params.n, "stream() streams one completion; use n=1")
        ids = self._encode_all([prompt], params)
        return self.loop.submit(_adder(ids, params), stream=True, aio=aio)

    def stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[str]:
        """Text deltas of the single completion of ``prompt`` (``params.n`` must be 1); a partial
        stop string is never yielded. Stopping the iteration early aborts the request."""
        start = time.perf_counter()
        handle = self._stream_handle(prompt, params, aio=False)
        try:
            for delta in handle.deltas():
                if delta.error is not None:
                    raise delta.error
                if delta.text:
                    yield delta.text
        finally:  # closed early: abort now, not when the inner iterator is collected
            handle.cancel()  # a no-op once the request finished
        self._account(handle.outputs or [], start)

    async def astream(self, prompt: Prompt, params: SamplingParams) -> AsyncIterator[str]:
        """:meth:`stream` for asyncio callers."""
        start = time.perf_counter()
        handle = self._stream_handle(prompt, params, aio=True)
        try:
            async for delta in handle.adeltas():
                if delta.error is not None:
                    raise delta.error
                if delta.text:
                    yield delta.text
        finally:
            handle.cancel()
        self._account(handle.outputs or [], start)

    def asubmit(self, prompt_ids: Sequence[Sequence[int]],
                params: SamplingParams | BeamSearchParams, *, stream: bool = False,
                first_sample: int = 0) -> RequestHandle:
        """Submit one request per prompt (token ids, e.g. from ``encode_prompt``) from the
        running asyncio event loop, after validating each against the model (raises before any
        work); the handle is bound to that loop. With ``stream=True`` it yields the deltas of
        every sample (``StreamDelta.index``), then its outputs. The caller owns the handle:
        leaving its iteration early or cancelling the awaiting task aborts its requests. Nothing
        is added to :attr:`usage` (the caller counts from ``handle.outputs``). For servers that
        need per-sample events; :meth:`agenerate` / :meth:`astream` are the simple faces.
        ``params`` may be ``BeamSearchParams`` (one beam search per prompt; not streamed).
        ``first_sample``: sample ``j`` of each prompt draws as sample ``first_sample + j`` of the
        seed (``LLMEngine.add_request``)."""
        ids = [list(p) for p in prompt_ids]
        for p in ids:
            self.engine.validate(p, params)
        check_first_sample(first_sample)
        return self.loop.submit(_adder(ids, params, first_sample), stream=stream, aio=True)

    async def aprompt_logprobs(self, prompt_ids: Sequence[int], top: int | None = None
                               ) -> PromptLogprobs:
        """How the model reads the prompt (:class:`PromptLogprobs`: each token's logprob after
        the first and, with ``top``, the ``top`` most likely tokens at each position and the
        prompt token's rank), from one prefill, from the asyncio loop; cancelling aborts it.
        Raises ``InvalidParameterError`` for a bad ``top`` (an integer in
        [0, ``MAX_LOGPROBS``]), ``InvalidPromptError`` for ids the model cannot run,
        ``NumericalError`` for a non-finite logprob."""
        if top is not None and (isinstance(top, bool) or not isinstance(top, int)
                                or not 0 <= top <= MAX_LOGPROBS):
            raise InvalidParameterError("top", top, f"must be None or an integer in "
                                        f"[0, {MAX_LOGPROBS}]")
        ids, _ = self.engine.validate(list(prompt_ids), SamplingParams(max_tokens=1))
        if len(ids) < 2:
            return PromptLogprobs([], None if top is None else [],
                                  None if top is None else [])
        handle = self.loop.submit(lambda engine: [engine.add_scoring_request(ids, 1, top)],
                                  aio=True)
        [out] = await handle.aresult()
        if out.error is not None:
            raise out.error
        assert out.token_scores is not None
        if top is None:
            return PromptLogprobs(out.token_scores[0])
        assert out.token_tops is not None and out.token_ranks is not None
        return PromptLogprobs(out.token_scores[0], out.token_tops[0], out.token_ranks[0])

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j]`` = log p(continuations[i][j] | prompts[i]) summed over its tokens.

        The scored tokens are those of ``tokenize(prompt + continuation)`` after its longest
        common prefix with the prompt's tokens (a token merging across the boundary is scored),
        as ``HFGenerator.score`` does; an empty continuation scores 0. Prompts shared by several
        continuations are prefilled once (prefix cache)."""
        start = time.perf_counter()
        plist = check_prompts(prompts)
        if isinstance(continuations, (str, bytes)) or len(continuations) != len(plist):
            raise InvalidParameterError("continuations", f"<{len(continuations)} items>",
                                        f"need one list of strings per prompt ({len(plist)})")
        items: list[tuple[list[int], int]] = []
        shape: list[int] = []
        for prompt, conts in zip(plist, continuations):
            if isinstance(conts, (str, bytes)) or not isinstance(conts, Sequence):
                raise InvalidParameterError("continuations", conts,
                                            "each item must be a list of strings")
            ids = encode_prompt(self.tokenizer, prompt)
            text = render_prompt(self.tokenizer, prompt)
            for cont in conts:
                if not isinstance(cont, str):
                    raise InvalidParameterError("continuations", cont, "must be a string")
                items.append(scored_sequence(self.tokenizer, prompt, ids, text, cont))
            shape.append(len(conts))
        ran: list[RequestOutput] = []

        def run(make: Callable[[], list[str]]) -> list[RequestOutput]:
            outs = self.loop.submit(lambda engine: make()).result()
            ran.extend(outs)
            return outs

        try:
            flat = iter(self.engine.score_sequences(items, run=run))
        finally:
            self._account(ran, start, scoring=True)
        return [[next(flat) for _ in range(k)] for k in shape]

    async def ascore(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
                     ) -> list[list[float]]:
        """:meth:`score` for asyncio callers (it waits in a worker thread)."""
        return await asyncio.to_thread(self.score, prompts, continuations)

    def close(self) -> None:
        """Stop the engine loop; later calls raise ``EngineDeadError``."""
        self.loop.close()

    def __enter__(self) -> LocalGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _adder(ids: list[list[int]], params: SamplingParams | BeamSearchParams,
           first_sample: int = 0) -> Callable[[LLMEngine], list[str]]:
    """A loop submission adding one request per prompt; if one cannot be added, those already
    added are aborted and the error goes to the caller."""

    def add(engine: LLMEngine) -> list[str]:
        rids: list[str] = []
        try:
            for p in ids:
                rids.append(engine.add_request(p, params, first_sample=first_sample))
        except BaseException:
            for r in rids:
                engine.abort(r)
            raise
        return rids

    return add
