"""Token pieces and logprob blocks in the OpenAI wire formats (pure functions of the tokens).

A token's name is the text it adds after the tokens before it (``continuation_text``: a
SentencePiece word-initial token reads " upon", not "upon"), or ``token_id:N`` when the client
asked for ids (vLLM's ``return_tokens_as_token_ids``). ``text_offset`` of a token is the length
of the names before it, so for text that decodes back to itself (the usual case) it indexes the
echoed prompt and the completion exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from metagen.engine.outputs import PromptLogprobs
from metagen.generators.tokenize import continuation_text


def piece(tokenizer: Any, context: Sequence[int], token: int) -> str:
    """The text ``token`` adds after ``context``."""
    return continuation_text(tokenizer, context, [token])


def token_name(tokenizer: Any, context: Sequence[int], token: int, as_ids: bool) -> str:
    return f"token_id:{token}" if as_ids else piece(tokenizer, context, token)


Tops = Sequence[dict[int, float] | None]  # per token, its top alternatives (None: none)


def completion_block(tokenizer: Any, context: Sequence[int], token_ids: Sequence[int],
                     logprobs: Sequence[float | None], tops: Tops | None, as_ids: bool,
                     offset: int = 0) -> dict[str, Any]:
    """A ``/v1/completions`` ``logprobs`` object for ``token_ids`` following ``context``
    (``logprobs[i]`` and ``tops[i]`` None for the first prompt token, which nothing predicts);
    ``offset`` is the ``text_offset`` of the first token."""
    return completion_block_end(tokenizer, context, token_ids, logprobs, tops, as_ids,
                                offset)[0]


def completion_block_end(tokenizer: Any, context: Sequence[int], token_ids: Sequence[int],
                         logprobs: Sequence[float | None], tops: Tops | None, as_ids: bool,
                         offset: int = 0) -> tuple[dict[str, Any], int]:
    """:func:`completion_block` and the ``text_offset`` just past its last token (where the
    block of the tokens that follow starts)."""
    names, offsets, top_list = [], [], []
    ctx = list(context)
    for i, tok in enumerate(token_ids):
        text = piece(tokenizer, ctx, tok)
        names.append(f"token_id:{tok}" if as_ids else text)
        offsets.append(offset)
        offset += len(text)
        if tops is not None:
            alts = tops[i]
            top_list.append(None if alts is None else
                            {token_name(tokenizer, ctx, t, as_ids): lp for t, lp in alts.items()})
        ctx.append(tok)
    return ({"tokens": names, "token_logprobs": list(logprobs), "text_offset": offsets,
             "top_logprobs": top_list if tops is not None else None}, offset)


def join_blocks(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """The echoed prompt's block followed by the completion's (prompt positions without top
    alternatives read ``None``)."""
    tops: list[Any] | None = None
    if second["top_logprobs"] is not None or first["top_logprobs"] is not None:
        tops = ((first["top_logprobs"] or [None] * len(first["tokens"]))
                + (second["top_logprobs"] or [None] * len(second["tokens"])))
    return {key: first[key] + second[key] for key in ("tokens", "token_logprobs", "text_offset")
            } | {"top_logprobs": tops}


def first_k(alternatives: dict[int, float], k: int) -> dict[int, float]:
    """The ``k`` most likely of ``alternatives`` (a top-k dict, most likely first)."""
    return dict(itertools.islice(alternatives.items(), k))


def echo_block(tokenizer: Any, prompt_ids: Sequence[int], read: PromptLogprobs,
               k: int, as_ids: bool) -> dict[str, Any]:
    """The echoed prompt's ``/v1/completions`` ``logprobs`` block: each token's logprob (the
    first None) and, for ``k`` > 0, its ``k`` top alternatives (the first None)."""
    tops: list[dict[int, float] | None] | None = None
    if k:
        assert read.tops is not None
        tops = [None, *(first_k(t, k) for t in read.tops)]
    return completion_block(tokenizer, [], prompt_ids, [None, *read.logprobs], tops, as_ids)


def vllm_prompt_logprobs(tokenizer: Any, prompt_ids: Sequence[int], read: PromptLogprobs,
                         k: int, as_ids: bool) -> list[dict[str, Any] | None]:
    """vLLM's ``prompt_logprobs`` list: None for the first token, then per token
    ``{token id: {"logprob", "rank", "decoded_token"}}`` for the prompt token and the ``k``
    most likely tokens at its position (``k`` + 1 entries when it is not among them)."""
    assert read.tops is not None and read.ranks is not None
    out: list[dict[str, Any] | None] = [None]
    for t in range(1, len(prompt_ids)):
        ctx, tok = prompt_ids[:t], prompt_ids[t]
        alts = first_k(read.tops[t - 1], k)
        entry = {str(tok): _vllm_logprob(tokenizer, ctx, tok, read.logprobs[t - 1],
                                         read.ranks[t - 1], as_ids)}
        for rank, (alt, lp) in enumerate(alts.items(), start=1):
            entry.setdefault(str(alt), _vllm_logprob(tokenizer, ctx, alt, lp, rank, as_ids))
        out.append(entry)
    return out


def _vllm_logprob(tokenizer: Any, context: Sequence[int], token: int, logprob: float,
                  rank: int, as_ids: bool) -> dict[str, Any]:
    return {"logprob": logprob, "rank": rank,
            "decoded_token": token_name(tokenizer, context, token, as_ids)}


class StreamLogprobs:
    """The ``logprobs`` of each streamed chunk of one sample: the block of the chunk's tokens,
    read in the context of the prompt and the tokens streamed before them, so that the chunks'
    blocks joined equal the non-streamed response's."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int], chat: bool, as_ids: bool,
                 want_tops: bool, offset: int = 0) -> None:
        self.tokenizer, self.chat, self.as_ids, self.want_tops = tokenizer, chat, as_ids, want_tops
        self.context, self.offset = list(prompt_ids), offset

    def block(self, token_ids: Sequence[int], logprobs: Sequence[float], tops: Tops
              ) -> dict[str, Any]:
        """The block of the next ``token_ids`` (their ``logprobs`` and top alternatives)."""
        alts = tops if self.want_tops else None
        if self.chat:
            out = chat_block(self.tokenizer, self.context, token_ids, logprobs, alts,
                             self.as_ids)
        else:
            out, self.offset = completion_block_end(self.tokenizer, self.context, token_ids,
                                                    logprobs, alts, self.as_ids, self.offset)
        self.context.extend(token_ids)
        return out


def chat_block(tokenizer: Any, context: Sequence[int], token_ids: Sequence[int],
               logprobs: Sequence[float], tops: Tops | None, as_ids: bool) -> dict[str, Any]:
    """A chat ``logprobs`` object: ``{"content": [{token, logprob, bytes, top_logprobs}]}``."""
    content = []
    ctx = list(context)
    for i, tok in enumerate(token_ids):
        alts = [_entry(token_name(tokenizer, ctx, t, as_ids), lp)
                for t, lp in ((tops[i] or {}) if tops is not None else {}).items()]
        content.append(_entry(token_name(tokenizer, ctx, tok, as_ids), logprobs[i])
                       | {"top_logprobs": alts})
        ctx.append(tok)
    return {"content": content}


def _entry(name: str, logprob: float) -> dict[str, Any]:
    return {"token": name, "logprob": logprob, "bytes": list(name.encode("utf-8"))}
