"""Server-sent events of a streamed completion or chat completion.

Text deltas go out as the engine produces them (a stop string is never partly sent: the engine's
deltas hold back what could be its start). Each choice's ``finish_reason`` comes in a final chunk
once every choice has finished, then the ``usage`` chunk when ``stream_options.include_usage``,
then ``data: [DONE]``. A failure after the stream started (a sample's logits turned non-finite,
an engine fault) is an ``{"error": ...}`` event, then ``data: [DONE]``: the openai SDK raises it.
Leaving the iteration early (the client went away) aborts the requests.

With ``logprobs`` every chunk carries the logprobs of its own tokens (a chunk may hold tokens
and no text while a possible stop string is held back); the chunks' blocks joined equal the
non-streamed response's. A completion stream that echoes the prompt or asks for
``prompt_logprobs`` starts with one chunk per choice holding the prompt's text, its block and
vLLM's ``prompt_logprobs``.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from metagen.engine.loop import RequestHandle
from metagen.engine.outputs import PromptLogprobs
from metagen.server.errors import api_error, error_event
from metagen.server.logprobs import StreamLogprobs
from metagen.server.requests import GenerationRequest
from metagen.server.responses import check_outputs, new_id, output_text, prompt_fields, usage

DONE = "data: [DONE]\n\n"


class Chunks:
    """Chunk bodies of one stream."""

    def __init__(self, req: GenerationRequest, model: str) -> None:
        self.req, self.model = req, model
        self.id, self.created = new_id(req.chat), int(time.time())
        self.object = "chat.completion.chunk" if req.chat else "text_completion"

    def event(self, choices: list[dict[str, Any]], usage: dict[str, Any] | None = None,
              extra: dict[str, Any] | None = None) -> str:
        body: dict[str, Any] = {"id": self.id, "object": self.object, "created": self.created,
                                "model": self.model, "choices": choices}
        if usage is not None:
            body["usage"] = usage
        body |= extra or {}
        return f"data: {json.dumps(body, allow_nan=False)}\n\n"

    def choice(self, index: int, text: str | None, finish: str | None = None,
               stop_reason: Any = None, logprobs: dict[str, Any] | None = None
               ) -> dict[str, Any]:
        out: dict[str, Any] = {"index": index, "logprobs": logprobs, "finish_reason": finish}
        if self.req.chat:
            out["delta"] = {} if text is None else {"content": text}
        else:
            out["text"] = text or ""
        if finish is not None:
            out["stop_reason"] = stop_reason
        return out


TokenCounter = Callable[[int, int], None]  # (prompt tokens, generated tokens) of a request


async def sse_events(req: GenerationRequest, handle: RequestHandle, model: str,
                     count: TokenCounter | None = None,
                     prompt_reads: Sequence[PromptLogprobs] | None = None,
                     tokenizer: Any = None) -> AsyncIterator[str]:
    """The events of ``req`` running under ``handle`` (see the module docstring); ``count``
    gets the request's token counts once it finished; ``prompt_reads[p]`` is how the model
    read prompt ``p`` (when ``req.prompt_top`` is set); ``tokenizer`` names the tokens of
    logprob blocks (needed when the request asks for logprobs)."""
    chunks = Chunks(req, model)
    n = req.params.n
    try:
        try:
            async for event in _body(req, handle, chunks, n, count, prompt_reads, tokenizer):
                yield event
        except Exception as exc:  # noqa: BLE001 -- reported to the client as an error event
            yield error_event(api_error(exc))
        yield DONE
    finally:
        handle.cancel()  # a no-op once the requests finished


async def _body(req: GenerationRequest, handle: RequestHandle, chunks: Chunks, n: int,
                count: TokenCounter | None, prompt_reads: Sequence[PromptLogprobs] | None,
                tokenizer: Any) -> AsyncIterator[str]:
    if req.chat:
        yield chunks.event([{"index": i, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None} for i in range(n)])
    if req.echo or req.prompt_logprobs is not None:
        yield chunks.event(_prompt_choices(req, chunks, n, prompt_reads, tokenizer))
    cursors: dict[int, StreamLogprobs] = {}
    want = req.params.logprobs is not None
    prompt_of: dict[str, int] = {}
    async for delta in handle.adeltas():
        if delta.error is not None:
            raise delta.error
        if not delta.text and not (want and delta.token_ids):
            continue
        if not prompt_of:
            prompt_of = {rid: p for p, rid in enumerate(handle.request_ids)}
        p = prompt_of[delta.request_id]
        block = None
        if want:
            cursor = cursors.get(p * n + delta.index)
            if cursor is None:
                offset = len(req.prompt_texts[p]) if req.echo else 0
                cursor = cursors[p * n + delta.index] = StreamLogprobs(
                    tokenizer, req.prompts[p], req.chat, req.tokens_as_ids,
                    bool(req.params.logprobs), offset)
            block = cursor.block(delta.token_ids, delta.logprobs, delta.top_logprobs)
        yield chunks.event([chunks.choice(p * n + delta.index, delta.text, logprobs=block)])
    outs = handle.outputs or []
    check_outputs(outs)
    if count is not None:
        counts = usage(req, outs)
        count(counts["prompt_tokens"], counts["completion_tokens"])
    finals = []
    for p, out in enumerate(outs):
        for i, c in enumerate(out.outputs):
            tail = output_text(req, c)[len(c.text):]  # the stop string, when asked for
            finals.append(chunks.choice(p * n + i, tail if tail or not req.chat else None,
                                        c.finish_reason, c.stop_reason))
    yield chunks.event(finals)
    if req.include_usage:
        yield chunks.event([], usage(req, outs))


def _prompt_choices(req: GenerationRequest, chunks: Chunks, n: int,
                    prompt_reads: Sequence[PromptLogprobs] | None, tokenizer: Any
                    ) -> list[dict[str, Any]]:
    """The first completion chunk's choices: each prompt's echoed text, its logprob block and
    vLLM's ``prompt_logprobs``, as the request asks."""
    out = []
    for p in range(len(req.prompts)):
        read = prompt_reads[p] if prompt_reads is not None else None
        block, vllm = prompt_fields(req, p, read, tokenizer)
        text = req.prompt_texts[p] if req.echo else ""
        for i in range(n):
            choice = chunks.choice(p * n + i, text, logprobs=block)
            if vllm is not None:
                choice["prompt_logprobs"] = vllm
            out.append(choice)
    return out
