"""vLLM's request fields that map onto the engine (:mod:`metagen.server.vllm_compat`'s
supported rows), read from a body into plain values; each bad value is a 400 naming its field.

- ``chat_template_kwargs``: an object of extra variables for the chat template; a name the
  renderer sets itself (``messages``, ``add_generation_prompt``, ...) is refused.
- ``truncate_prompt_tokens`` k: keep the last k tokens of each prompt (vLLM's semantics; -1 is
  the model's context length, k larger than it is a 400).
- ``use_beam_search`` (with ``n``, ``best_of``, ``length_penalty``): vLLM's beam search, width
  ``max(n, best_of)``, the ``n`` best hypotheses returned (vLLM's current server takes the width
  from ``n``; its older one from ``best_of``). Only the fields that mean something to a beam
  search are accepted with it (:data:`BEAM_FIELDS`); others are refused, not ignored.
- ``skip_special_tokens`` false: :func:`text_with_special` is the output text with its special
  tokens, as vLLM's (a stop or end token that ended the output stays out of the text unless
  ``include_stop_str_in_output``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.beam_params import BeamSearchParams
from metagen.errors import InvalidParameterError
from metagen.generators.tokenize import CONTEXT_TOKENS, decode_ids
from metagen.server.errors import bad_request
from metagen.server.structured import STRUCTURED_FIELDS, constraint_fields
from metagen.server.vllm_compat import unsupported
from metagen.types import Completion

VLLM_FIELDS = frozenset({"add_special_tokens", "skip_special_tokens", "truncate_prompt_tokens",
                         "use_beam_search", "length_penalty", "best_of"})
RESERVED_TEMPLATE_NAMES = frozenset({"messages", "conversation", "add_generation_prompt",
                                     "continue_final_message", "tokenize", "chat_template",
                                     "tools", "documents", "return_dict", "tokenizer"})
BEAM_FIELDS = frozenset({"model", "prompt", "messages", "n", "best_of", "length_penalty",
                         "use_beam_search", "max_tokens", "max_completion_tokens", "temperature",
                         "seed", "user", "add_special_tokens", "skip_special_tokens",
                         "truncate_prompt_tokens", "chat_template_kwargs",
                         "add_generation_prompt", "continue_final_message", "stream",
                         "include_stop_str_in_output", *STRUCTURED_FIELDS})


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def chat_template_kwargs(body: Mapping[str, Any]) -> dict[str, Any]:
    """The template's extra variables (``{}`` when not given)."""
    value = body.get("chat_template_kwargs")
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise bad_request("chat_template_kwargs", "chat_template_kwargs must be an object of "
                          "template variables")
    taken = sorted(set(value) & RESERVED_TEMPLATE_NAMES)
    if taken:
        raise bad_request("chat_template_kwargs", f"chat_template_kwargs cannot set "
                          f"{taken[0]!r}: the server sets it (use the request field)")
    return dict(value)


def truncation(body: Mapping[str, Any], max_model_len: int) -> int | None:
    """How many prompt tokens to keep (None: all)."""
    value = body.get("truncate_prompt_tokens")
    if value is None:
        return None
    if (not isinstance(value, int) or isinstance(value, bool)
            or not (value == -1 or 1 <= value <= max_model_len)):
        raise bad_request("truncate_prompt_tokens", f"truncate_prompt_tokens must be -1 or an "
                          f"integer in [1, {max_model_len}] (the model's context length), got "
                          f"{_shown(value)}")
    return max_model_len if value == -1 else value


def truncated(ids: Sequence[int], keep: int | None) -> list[int]:
    """The last ``keep`` tokens of ``ids`` (all with None)."""
    return list(ids) if keep is None else list(ids)[-keep:]


def wants_beam(body: Mapping[str, Any]) -> bool:
    """Whether the body asks for beam search; refuses the fields a beam search cannot honour."""
    value = body.get("use_beam_search", False)
    if not isinstance(value, bool):
        raise bad_request("use_beam_search", f"use_beam_search must be true or false, got "
                          f"{_shown(value)}")
    if not value:
        if "length_penalty" in body:
            raise bad_request("length_penalty", "length_penalty needs use_beam_search: true")
        best_of = body.get("best_of")
        if best_of is not None and best_of != body.get("n", 1):
            raise unsupported("best_of", "best_of other than n needs use_beam_search: true "
                              "(metagen's best_of_n strategy is the \"metagen\" field)")
        return False
    for name in sorted(body):
        if name not in BEAM_FIELDS:
            raise unsupported(name, "this field with use_beam_search (a beam search scores "
                              "with the model's raw log-probabilities)")
    if body.get("stream"):
        raise unsupported("stream", "streaming a beam search (its hypotheses change until "
                          "the end)")
    return True


def beam_params(body: Mapping[str, Any], n: int, max_tokens: int) -> BeamSearchParams:
    """The beam search of a body :func:`wants_beam` accepted, returning ``n`` hypotheses."""
    best_of = body.get("best_of", n)
    if not isinstance(best_of, int) or isinstance(best_of, bool) or best_of < n:
        raise bad_request("best_of", f"best_of must be an integer >= n ({n}), got "
                          f"{_shown(best_of)}")
    constraint, _ = constraint_fields(body)
    names = beam_wire_names(body)
    try:
        return BeamSearchParams(num_beams=best_of, max_tokens=max_tokens,
                                num_return_sequences=n,
                                length_penalty=body.get("length_penalty", 1.0), **constraint)
    except InvalidParameterError as exc:
        raise bad_request(names.get(exc.param, exc.param), str(exc)) from None


def beam_wire_names(body: Mapping[str, Any]) -> dict[str, str]:
    """``BeamSearchParams`` field -> the client's name for it (for the engine's refusals)."""
    return {"num_beams": "best_of" if "best_of" in body else "n",
            "num_return_sequences": "n", "length_penalty": "length_penalty",
            "max_tokens": "max_completion_tokens" if "max_completion_tokens" in body
            else "max_tokens"}


def skip_special(body: Mapping[str, Any]) -> bool:
    """``skip_special_tokens`` (default true); false is refused where metagen cannot honour
    it (streamed text, stop strings: the engine's text is the one with special tokens
    skipped)."""
    value = body.get("skip_special_tokens", True)
    if not isinstance(value, bool):
        raise bad_request("skip_special_tokens", f"skip_special_tokens must be true or false, "
                          f"got {_shown(value)}")
    if not value:
        for name in ("stream", "stop"):
            if body.get(name):
                raise unsupported("skip_special_tokens", f"skip_special_tokens: false with "
                                  f"{name}")
    return value


def text_with_special(tokenizer: Any, prompt_ids: Sequence[int], c: Completion,
                      include_stop: bool) -> str:
    """The text of ``c``'s tokens, special tokens kept, as it reads after the prompt; the token
    that ended it (an end or stop token) is left out unless ``include_stop``."""
    ids = list(c.token_ids)
    if (ids and c.finish_reason == "stop" and not isinstance(c.stop_reason, str)
            and not include_stop):
        ids = ids[:-1]
    if not ids:
        return ""
    context = list(prompt_ids[-CONTEXT_TOKENS:])
    head = decode_ids(tokenizer, context, skip_special_tokens=False)
    whole = decode_ids(tokenizer, context + ids, skip_special_tokens=False)
    if whole.startswith(head):
        return whole[len(head):]
    return decode_ids(tokenizer, ids, skip_special_tokens=False)
