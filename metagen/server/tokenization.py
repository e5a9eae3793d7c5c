"""vLLM's tokenizer routes: ``POST /tokenize``, ``POST /detokenize``, ``GET /tokenizer_info``.

Shapes as vLLM serves them (lm-evaluation-harness's remote tokenizer reads them, so it needs no
local copy of the tokenizer):

- ``/tokenize``: ``{"model"?, "prompt": str, "add_special_tokens"? (default true)}`` or
  ``{"model"?, "messages", "add_generation_prompt"? (true), "continue_final_message"?,
  "chat_template_kwargs"?, "add_special_tokens"? (false)}``, and ``"return_token_strs"``;
  answers ``{"count", "max_model_len", "tokens", "token_strs"}`` (``token_strs`` null unless
  asked). The ids are the tokenizer's own: any text, the empty string and special-token text
  included (unlike a generation prompt, nothing is refused for being only special tokens).
- ``/detokenize``: ``{"model"?, "tokens": [id, ...]}`` -> ``{"prompt": text}``, the
  tokenizer's ``decode`` (special tokens kept, as vLLM's); an id outside the vocabulary is a 400.
- ``/tokenizer_info``: the tokenizer's configuration (``tokenizer_config.json``'s fields:
  ``tokenizer_class``, ``bos_token``, ``eos_token``, ``pad_token``, ``unk_token``,
  ``chat_template``, ...), token objects as their text, with ``model_max_length`` the served
  context length; file paths of the server's disk are left out.

``model`` is optional (as vLLM); given, it must be the served name (404 otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from metagen.server.errors import ApiError, bad_request
from metagen.server.requests import check_fields, flag, parse_messages, render_chat
from metagen.server.vllm_compat import refuse_unsupported
from metagen.server.vllm_fields import chat_template_kwargs

PROMPT_FIELDS = frozenset({"model", "prompt", "add_special_tokens", "return_token_strs"})
CHAT_FIELDS = frozenset({"model", "messages", "add_generation_prompt", "continue_final_message",
                         "chat_template_kwargs", "add_special_tokens", "return_token_strs"})
_SPECIAL = ("bos_token", "eos_token", "pad_token", "unk_token")


def check_optional_model(body: Mapping[str, Any], served: str) -> None:
    """``model`` may be left out; given, it must be ``served``."""
    model = body.get("model")
    if model is not None and model != served:
        raise ApiError(404, f"the model {str(model)[:80]!r} does not exist; this server serves "
                       f"{served!r}", param="model", code="model_not_found")


def tokenize(body: Mapping[str, Any], tokenizer: Any, max_model_len: int, served: str,
             max_messages: int) -> dict[str, Any]:
    """The ``/tokenize`` answer (see the module docstring)."""
    check_optional_model(body, served)
    refuse_unsupported(body)
    chat = body.get("messages") is not None
    if chat and body.get("prompt") is not None:
        raise bad_request("messages", "give prompt or messages, not both")
    body = check_fields(body, CHAT_FIELDS if chat else PROMPT_FIELDS)
    if chat:
        add_prompt = flag(body, "add_generation_prompt", True)
        cont = flag(body, "continue_final_message", False)
        if cont and add_prompt:
            raise bad_request("continue_final_message", "continue_final_message and "
                              "add_generation_prompt cannot both be true")
        messages = parse_messages(body["messages"], max_messages)
        text = render_chat(tokenizer, messages, add_prompt, cont, chat_template_kwargs(body))
    else:
        prompt = body.get("prompt")
        if not isinstance(prompt, str):
            raise bad_request("prompt", "prompt (a string) or messages is required")
        text = prompt
    special = flag(body, "add_special_tokens", not chat)
    ids = [int(t) for t in tokenizer(text, add_special_tokens=special)["input_ids"]]
    strs = (tokenizer.convert_ids_to_tokens(ids) if flag(body, "return_token_strs", False)
            else None)
    return {"count": len(ids), "max_model_len": max_model_len, "tokens": ids,
            "token_strs": strs}


def detokenize(body: Mapping[str, Any], tokenizer: Any, served: str) -> dict[str, Any]:
    """The ``/detokenize`` answer (see the module docstring)."""
    check_optional_model(body, served)
    body = check_fields(body, frozenset({"model", "tokens"}))
    tokens = body.get("tokens")
    size = len(tokenizer)
    if not isinstance(tokens, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise bad_request("tokens", "tokens must be a list of token ids")
    bad = [t for t in tokens if not 0 <= t < size]
    if bad:
        raise bad_request("tokens", f"token id {bad[0]} is outside the vocabulary [0, {size})")
    return {"prompt": str(tokenizer.decode(tokens))}


def tokenizer_info(tokenizer: Any, max_model_len: int) -> dict[str, Any]:
    """The ``/tokenizer_info`` answer (see the module docstring)."""
    info: dict[str, Any] = {}
    for key, value in getattr(tokenizer, "init_kwargs", {}).items():
        if key.endswith(("_file", "_path", "name_or_path")) or key == "chat_template":
            continue
        plain = _plain(value)
        try:
            json.dumps(plain, allow_nan=False)
        except (TypeError, ValueError):
            continue
        info[key] = plain
    for name in _SPECIAL:
        info[name] = getattr(tokenizer, name, None)
    info["tokenizer_class"] = type(tokenizer).__name__
    info["chat_template"] = getattr(tokenizer, "chat_template", None)
    info["model_max_length"] = max_model_len
    return info


def _plain(value: Any) -> Any:
    """``value`` with token objects (``AddedToken``) as their text, containers walked."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    content = getattr(value, "content", None)
    return content if isinstance(content, str) else value
