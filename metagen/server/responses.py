"""Non-streamed response bodies of ``/v1/completions`` and ``/v1/chat/completions``.

Choices are numbered prompt by prompt: choice ``p * n + i`` is sample ``i`` of prompt ``p``.
``usage`` counts each prompt once (its ``n`` samples share one prefill), every generated token,
and ``prompt_tokens_details.cached_tokens`` served from the prefix cache.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

from metagen.engine.outputs import PromptLogprobs, RequestOutput
from metagen.server.errors import api_error
from metagen.server.logprobs import (
    chat_block,
    completion_block,
    echo_block,
    join_blocks,
    vllm_prompt_logprobs,
)
from metagen.server.requests import GenerationRequest
from metagen.server.vllm_fields import text_with_special
from metagen.types import Completion


def new_id(chat: bool) -> str:
    return ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex


def check_outputs(outs: Sequence[RequestOutput]) -> None:
    """Raise the first sample failure (e.g. non-finite logits) as the request's error."""
    for out in outs:
        if out.error is not None:
            raise api_error(out.error)


def usage(req: GenerationRequest, outs: Sequence[RequestOutput] | None) -> dict[str, Any]:
    prompt = sum(len(p) for p in req.prompts)
    generated = sum(len(c.token_ids) for o in outs or () for c in o.outputs)
    cached = sum(o.num_cached_tokens for o in outs or ())
    return {"prompt_tokens": prompt, "completion_tokens": generated,
            "total_tokens": prompt + generated,
            "prompt_tokens_details": {"cached_tokens": cached}}


def output_text(req: GenerationRequest, c: Completion, tokenizer: Any = None,
                prompt_ids: Sequence[int] = ()) -> str:
    """The completion's text, with its stop string when ``include_stop_str_in_output``; with
    ``skip_special_tokens`` false, its tokens' text with special tokens (``tokenizer`` and
    the prompt's ids needed then)."""
    if not req.skip_special:
        return text_with_special(tokenizer, prompt_ids, c, req.include_stop)
    if req.include_stop and c.finish_reason == "stop" and isinstance(c.stop_reason, str):
        return c.text + c.stop_reason
    return c.text


def prompt_fields(req: GenerationRequest, p: int, read: PromptLogprobs | None, tokenizer: Any
                  ) -> tuple[dict[str, Any] | None, list[dict[str, Any] | None] | None]:
    """(the echoed prompt's ``logprobs`` block, vLLM's ``prompt_logprobs`` list) of prompt
    ``p`` as ``req`` asks for them (None where it does not), from how the model read it."""
    ids, as_ids = req.prompts[p], req.tokens_as_ids
    block = vllm = None
    if read is not None and req.echo_logprobs:
        block = echo_block(tokenizer, ids, read, req.params.logprobs or 0, as_ids)
    if read is not None and req.prompt_logprobs is not None:
        vllm = vllm_prompt_logprobs(tokenizer, ids, read, req.prompt_logprobs, as_ids)
    return block, vllm


def completion_response(req: GenerationRequest, outs: Sequence[RequestOutput] | None,
                        prompt_reads: Sequence[PromptLogprobs] | None, tokenizer: Any,
                        model: str) -> dict[str, Any]:
    """The ``text_completion`` object. ``outs`` is None for an echo-only request;
    ``prompt_reads[p]`` is how the model read prompt ``p`` (when ``req.prompt_top`` is set)."""
    choices: list[dict[str, Any]] = []
    n = req.params.n
    for p, ids in enumerate(req.prompts):
        samples = outs[p].outputs if outs is not None else [None] * n
        read = prompt_reads[p] if prompt_reads is not None else None
        prompt_block, vllm = prompt_fields(req, p, read, tokenizer)
        for i, c in enumerate(samples):
            text = req.prompt_texts[p] if req.echo else ""
            block = prompt_block
            if c is not None:
                gen_text = output_text(req, c, tokenizer, ids)
                if req.params.logprobs is not None:
                    gen_block = completion_block(
                        tokenizer, ids, c.token_ids, c.logprobs or (), c.top_logprobs
                        if req.params.logprobs else None, req.tokens_as_ids, len(text))
                    block = gen_block if prompt_block is None else join_blocks(prompt_block,
                                                                               gen_block)
                text += gen_text
            choice = {"index": p * n + i, "text": text, "logprobs": block,
                      "finish_reason": "length" if c is None else c.finish_reason,
                      "stop_reason": None if c is None else c.stop_reason}
            if vllm is not None:
                choice["prompt_logprobs"] = vllm
            choices.append(choice)
    return {"id": new_id(False), "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(req, outs)}


def chat_response(req: GenerationRequest, outs: Sequence[RequestOutput],
                  prompt_reads: Sequence[PromptLogprobs] | None, tokenizer: Any, model: str
                  ) -> dict[str, Any]:
    """The ``chat.completion`` object (one conversation, ``n`` choices); with
    ``prompt_logprobs``, vLLM's top-level list of the rendered conversation's tokens, from
    ``prompt_reads[0]``."""
    choices = []
    for i, c in enumerate(outs[0].outputs):
        block = None
        if req.params.logprobs is not None:
            block = chat_block(tokenizer, req.prompts[0], c.token_ids, c.logprobs or (),
                               c.top_logprobs if req.params.logprobs else None,
                               req.tokens_as_ids)
        choices.append({"index": i, "message": {"role": "assistant",
                                                "content": output_text(req, c, tokenizer,
                                                                       req.prompts[0])},
                        "logprobs": block, "finish_reason": c.finish_reason,
                        "stop_reason": c.stop_reason})
    body = {"id": new_id(True), "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": choices, "usage": usage(req, outs)}
    if prompt_reads is not None:
        body["prompt_logprobs"] = prompt_fields(req, 0, prompt_reads[0], tokenizer)[1]
    return body
