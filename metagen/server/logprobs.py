"""Token pieces and logprob blocks in the OpenAI wire formats (pure functions of the tokens).

A token's name is the text it adds after the tokens before it (``continuation_text``: a
SentencePiece word-initial token reads " upon", not "upon"), or ``token_id:N`` when the client
asked for ids (vLLM's ``return_tokens_as_token_ids``). ``text_offset`` of a token is the length
of the names before it, so for text that decodes back to itself (the usual case) it indexes the
echoed prompt and the completion exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.generators.tokenize import continuation_text


def piece(tokenizer: Any, context: Sequence[int], token: int) -> str:
    """The text ``token`` adds after ``context``."""
    return continuation_text(tokenizer, context, [token])


def token_name(tokenizer: Any, context: Sequence[int], token: int, as_ids: bool) -> str:
    return f"token_id:{token}" if as_ids else piece(tokenizer, context, token)


def completion_block(tokenizer: Any, context: Sequence[int], token_ids: Sequence[int],
                     logprobs: Sequence[float | None], tops: Sequence[dict[int, float]] | None,
                     as_ids: bool, offset: int = 0) -> dict[str, Any]:
    """A ``/v1/completions`` ``logprobs`` object for ``token_ids`` following ``context``
    (``logprobs[i]`` None for the first prompt token, which nothing predicts); ``offset`` is the
    ``text_offset`` of the first token."""
    names, offsets, top_list = [], [], []
    ctx = list(context)
    for i, tok in enumerate(token_ids):
        text = piece(tokenizer, ctx, tok)
        names.append(f"token_id:{tok}" if as_ids else text)
        offsets.append(offset)
        offset += len(text)
        if tops is not None:
            top_list.append({token_name(tokenizer, ctx, t, as_ids): lp
                             for t, lp in tops[i].items()})
        ctx.append(tok)
    return {"tokens": names, "token_logprobs": list(logprobs), "text_offset": offsets,
            "top_logprobs": top_list if tops is not None else None}


def join_blocks(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The echoed prompt's block followed by the completion's (prompt positions have no top
    alternatives: ``None``)."""
    tops: list[Any] | None = None
    if second["top_logprobs"] is not None:
        tops = [None] * len(first["tokens"]) + second["top_logprobs"]
    return {key: first[key] + second[key] for key in ("tokens", "token_logprobs", "text_offset")
            } | {"top_logprobs": tops}


def chat_block(tokenizer: Any, context: Sequence[int], token_ids: Sequence[int],
               logprobs: Sequence[float], tops: Sequence[dict[int, float]] | None,
               as_ids: bool) -> dict[str, Any]:
    """A chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = []
    ctx = list(context)
    for i, tok in enumerate(token_ids):
        alts = [] if tops is None else [_entry(token_name(tokenizer, ctx, t, as_ids), lp)
                                        for t, lp in tops[i].items()]
        content.append(_entry(token_name(tokenizer, ctx, tok, as_ids), logprobs[i])
                       | {"top_logprobs": alts})
        ctx.append(tok)
    return {"content": content}


def _entry(name: str, logprob: float) -> dict[str, Any]:
    return {"token": name, "logprob": logprob, "bytes": list(name.encode("utf-8"))}
