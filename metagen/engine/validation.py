"""Request checks that need the model: token ids against the vocabulary (prompts, logit bias,
token-id lists), lengths against the context (empty and over-long prompts, token budgets). Each
raises a typed ``ValueError`` naming the parameter before the engine does any work, so a bad
request never reaches a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.beam_params import BeamSearchParams
from metagen.errors import InvalidParameterError, InvalidPromptError
from metagen.types import SEED_MAX, SamplingParams


def context_limit(tokens: int, model_tokens: int, num_blocks: int, block_size: int) -> str:
    """What bounds a sequence at ``tokens``, for errors: the model's context (``model_tokens``,
    already capped by ``max_model_len``), or, when smaller, the KV cache's capacity (``num_blocks``
    blocks of ``block_size`` tokens), named as such with the options that raise it."""
    if tokens >= model_tokens:
        return f"this model's maximum context length is {tokens} tokens"
    return (f"the KV cache holds at most {tokens} tokens per sequence ({num_blocks} blocks of "
            f"{block_size}; the model's context is {model_tokens} tokens): a larger num_blocks "
            "or kv_cache_bytes (metagen serve --num-blocks) raises it")


def check_prompt_ids(prompt_ids: Any, vocab_size: int, max_model_len: int,
                     name: str = "prompt", limit: str | None = None) -> list[int]:
    """A non-empty list of in-vocabulary ids shorter than the context (``limit``: what bounds
    it, :func:`context_limit`; default the model's context)."""
    if isinstance(prompt_ids, (str, bytes)) or not isinstance(prompt_ids, Sequence):
        raise InvalidPromptError(name, prompt_ids, "must be a list of token ids")
    if len(prompt_ids) == 0:
        raise InvalidPromptError(name, prompt_ids, "must not be empty")
    for tok in prompt_ids:
        if not isinstance(tok, int) or isinstance(tok, bool) or not 0 <= tok < vocab_size:
            raise InvalidPromptError(
                name, tok, f"token ids must be integers in [0, {vocab_size}) (the vocabulary)")
    if len(prompt_ids) >= max_model_len:
        raise InvalidPromptError(
            name, f"<{len(prompt_ids)} tokens>",
            f"{limit or _model_limit(max_model_len)} and the prompt has {len(prompt_ids)}; "
            "shorten it (no silent truncation)")
    return list(prompt_ids)


def _model_limit(max_model_len: int) -> str:
    return f"this model's maximum context length is {max_model_len} tokens"


def _too_long(prompt_len: int, max_tokens: int, max_model_len: int, limit: str | None
              ) -> InvalidParameterError:
    return InvalidParameterError(
        "max_tokens", max_tokens,
        f"prompt ({prompt_len} tokens) + max_tokens ({max_tokens}) = {prompt_len + max_tokens} "
        f"tokens do not fit: {limit or _model_limit(max_model_len)}")


def check_params(params: Any, prompt_len: int, vocab_size: int, max_model_len: int,
                 has_tokenizer: bool, limit: str | None = None) -> SamplingParams:
    if not isinstance(params, SamplingParams):
        raise InvalidParameterError("params", params, "must be a metagen.SamplingParams")
    if prompt_len + params.max_tokens > max_model_len:
        raise _too_long(prompt_len, params.max_tokens, max_model_len, limit)
    for name in ("stop_token_ids", "allowed_token_ids"):
        for tok in getattr(params, name) or ():
            if tok >= vocab_size:
                raise InvalidParameterError(name, tok, f"must be < vocab size {vocab_size}")
    for tok in params.logit_bias or {}:
        if tok >= vocab_size:
            raise InvalidParameterError("logit_bias", tok, f"keys must be < vocab size {vocab_size}")
    if not has_tokenizer:
        for name in ("stop", "bad_words", "token_healing"):
            if getattr(params, name):
                raise InvalidParameterError(name, getattr(params, name),
                                            "needs an engine with a tokenizer")
    return params


def check_beam_params(params: BeamSearchParams, prompt_len: int, max_model_len: int,
                      held_blocks: int, num_blocks: int, has_tokenizer: bool,
                      limit: str | None = None) -> BeamSearchParams:
    """Prompt + ``max_tokens`` within the context, ``num_beams`` full-length beams within the
    ``num_blocks`` of the KV cache (a beam search waits for all its beams each step, so they must
    fit together; ``held_blocks`` is the most one beam of prompt + ``max_tokens`` tokens holds at
    once), and a tokenizer for ``token_healing``."""
    if params.token_healing and not has_tokenizer:
        raise InvalidParameterError("token_healing", params.token_healing,
                                    "needs an engine with a tokenizer")
    if prompt_len + params.max_tokens > max_model_len:
        raise _too_long(prompt_len, params.max_tokens, max_model_len, limit)
    need = params.num_beams * (held_blocks + 1)
    if need > num_blocks:
        raise InvalidParameterError(
            "num_beams", params.num_beams,
            f"{params.num_beams} beams of up to {prompt_len + params.max_tokens} tokens need up "
            f"to {need} KV blocks; the cache has {num_blocks}")
    return params


def check_first_sample(first_sample: object) -> None:
    """Raise :class:`InvalidParameterError` unless ``first_sample`` (a request's first sample
    index under its seed) is an integer in ``[0, 2**63 - 1]``."""
    if (isinstance(first_sample, bool) or not isinstance(first_sample, int)
            or not 0 <= first_sample <= SEED_MAX):
        raise InvalidParameterError("first_sample", first_sample,
                                    f"must be an integer in [0, {SEED_MAX}]")
