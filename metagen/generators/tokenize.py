"""Tokenizer-side helpers shared by the model backends: prompts to ids, ids to continuation text,
stop strings, bad words, the model's end tokens.

Conventions (the same for every backend that uses these helpers):

- A string prompt is tokenized with the tokenizer's special tokens (e.g. BOS); a chat prompt is
  rendered with the chat template, which writes its own special tokens, so none are added again.
  A prompt that yields no token besides special ones is rejected (V16); a
  whitespace-only string is a real prompt when the tokenizer gives it tokens.
- The text of a continuation is ``decode(context + output) - decode(context)`` with ``context``
  the last few prompt tokens, so word-initial spaces (SentencePiece ``▁``) and byte-fallback
  characters come out as they read after the prompt. Special tokens are never in the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.decoding.healing import text_after
from metagen.errors import InvalidPromptError
from metagen.generators.base import Prompt, render_prompt

CONTEXT_TOKENS = 8  # prompt tokens decoded before a continuation to get its leading space right


def encode_prompt(tokenizer: Any, prompt: Prompt) -> list[int]:
    """Token ids of one prompt (see the module docstring). Raises ``InvalidPromptError``."""
    return encode_text(tokenizer, render_prompt(tokenizer, prompt),
                       add_special_tokens=isinstance(prompt, str))


def encode_text(tokenizer: Any, text: str, *, add_special_tokens: bool,
                param: str = "prompt") -> list[int]:
    """Token ids of an already rendered prompt text; ``InvalidPromptError`` naming ``param``
    when it yields no token besides special ones."""
    ids = list(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    special = set(tokenizer.all_special_ids)
    if not any(t not in special for t in ids):
        raise InvalidPromptError(param, text, "tokenizes to no tokens besides special tokens")
    return ids


def check_fits_context(prompt_ids: Sequence[int], max_tokens: int, context_length: int,
                       limit: str | None = None) -> None:
    """``InvalidPromptError`` naming ``prompt`` (with both token counts and the context) when
    the prompt plus ``max_tokens`` new tokens does not fit in ``context_length``: the prompt,
    not the shared sampling parameters, is what one request cannot serve, so a caller running
    many prompts fails only this one (no silent truncation). ``limit`` says what bounds the
    length (the built-in engine's ``context_limit``: the model's context or its KV cache);
    default the model's maximum context length."""
    if len(prompt_ids) + max_tokens > context_length:
        what = limit or f"the model's maximum context length is {context_length} tokens"
        raise InvalidPromptError(
            "prompt", f"<{len(prompt_ids)} tokens>",
            f"prompt of {len(prompt_ids)} tokens + max_tokens={max_tokens} = "
            f"{len(prompt_ids) + max_tokens} does not fit: {what}")


def decode_ids(tokenizer: Any, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    """``tokenizer.decode(ids, skip_special_tokens=...)`` (default: skipped), through the Rust
    tokenizer directly when that gives the same text (no ``clean_up_tokenization_spaces``): the
    generation loop decodes every step, and the Python wrapper costs more than the decoding."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and not getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return str(backend.decode(list(ids), skip_special_tokens=skip_special_tokens))
    return str(tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens))


def continuation_text(tokenizer: Any, prompt_ids: Sequence[int], output_ids: Sequence[int],
                      healed: Sequence[int] = ()) -> str:
    """Text of ``output_ids`` as it reads after ``prompt_ids`` (special tokens skipped).

    ``healed`` are prompt tokens that token healing removed after ``prompt_ids``: the output
    re-produces their text first, and the result starts after it (``""`` while the output has
    re-produced only part of it)."""
    if not output_ids:
        return ""
    context = list(prompt_ids[-CONTEXT_TOKENS:])
    return text_after(decode_ids(tokenizer, context + list(healed)),
                      decode_ids(tokenizer, context + list(output_ids)),
                      lambda: decode_ids(tokenizer, output_ids), partial=bool(healed))


def find_stop(text: str, stops: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """Earliest ``(position, stop)`` with ``text[position:].startswith(stop)`` and
    ``position + len(stop) > start`` (i.e. the match ends in ``text[start:]``); at equal positions
    the longer stop wins. ``None`` when no stop string occurs there.
    """
    best: tuple[int, int, str] | None = None
    for stop in stops:
        pos = text.find(stop, max(0, start - len(stop) + 1))
        if pos >= 0 and (best is None or (pos, -len(stop)) < best[:2]):
            best = (pos, -len(stop), stop)
    return None if best is None else (best[0], best[2])


def eos_token_ids(model: Any, tokenizer: Any) -> tuple[int, ...]:
    """The model's end tokens: its generation config's ``eos_token_id`` (int or list) and the
    tokenizer's ``eos_token_id``, deduplicated, in that order."""
    found: list[int] = []
    gen_config = getattr(model, "generation_config", None)
    for source in (getattr(gen_config, "eos_token_id", None),
                   getattr(model.config, "eos_token_id", None),
                   getattr(tokenizer, "eos_token_id", None)):
        items = source if isinstance(source, (list, tuple)) else [source]
        for tok in items:
            if isinstance(tok, int) and tok >= 0 and tok not in found:
                found.append(tok)
    return tuple(found)


def scored_sequence(tokenizer: Any, prompt: Prompt, prompt_ids: list[int], prompt_text: str,
                    continuation: str) -> tuple[list[int], int]:
    """``(ids, k)``: the tokens to run and how many leading ones only condition; ``ids[k:]`` are
    scored (the rule of every backend's ``score``). An empty continuation scores nothing."""
    if not continuation:
        return list(prompt_ids), len(prompt_ids)
    whole = list(tokenizer(prompt_text + continuation,
                           add_special_tokens=isinstance(prompt, str))["input_ids"])
    k = 0
    while k < min(len(whole), len(prompt_ids)) and whole[k] == prompt_ids[k]:
        k += 1
    if k == 0:  # nothing to condition on: score the continuation tokenized on its own
        return list(prompt_ids) + list(
            tokenizer(continuation, add_special_tokens=False)["input_ids"]), len(prompt_ids)
    return whole, k
