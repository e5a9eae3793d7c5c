"""The one table of vLLM's request fields and routes: what ``metagen serve`` does with each.

A field vLLM or OpenAI clients send is either *supported* (it maps onto the engine and is
implemented) or *refused*: a 400 whose message says the field "is not supported by metagen"
and why (``code`` ``"unsupported_field"``), distinct from the 400 for a field nobody defines
(``code`` ``"unknown_field"``). A ``null`` value is "not given" and never refused. Each
supported row names the test that checks it against a reference (the official ``openai`` SDK
or plain HTTP against a real server); the README's compatibility table is :func:`markdown` of
these rows (a test keeps them equal).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metagen.server.errors import ApiError, bad_request


@dataclass(frozen=True, slots=True)
class Row:
    """One field or route: ``supported`` or refused, why / how, and (supported) its test."""

    name: str
    supported: bool
    note: str
    test: str = ""  # tests/server/<file>.py::<test function> (supported rows)


_COMPAT = "tests/server/test_vllm_compat.py::"
_TOK = "tests/server/test_vllm_tokenize.py::"

_NO_TOOLS = "tool calling: metagen has no tool-call parser"

FIELDS: tuple[Row, ...] = (
    Row("chat_template_kwargs", True, "passed to the chat template (e.g. Qwen3's "
        "`enable_thinking`); also on `/tokenize`",
        _COMPAT + "test_chat_template_kwargs_reach_the_template"),
    Row("add_special_tokens", True, "whether the tokenizer adds BOS etc. (default: true for "
        "a text prompt, false for a chat)", _COMPAT + "test_add_special_tokens_false_drops_bos"),
    Row("skip_special_tokens", True, "false: the output text keeps special tokens (not "
        "with `stream` or `stop` strings)", _COMPAT + "test_skip_special_tokens_false_keeps_them"),
    Row("truncate_prompt_tokens", True, "keeps the last k prompt tokens (-1: the context "
        "length), as vLLM", _COMPAT + "test_truncate_prompt_tokens_keeps_the_last_k"),
    Row("use_beam_search", True, "the engine's beam search: `n` beams (`best_of`: a wider "
        "beam), `n` best returned, `length_penalty`; scores are raw log-probabilities",
        _COMPAT + "test_beam_search_equals_the_library"),
    Row("length_penalty", True, "with `use_beam_search`", _COMPAT +
        "test_beam_search_equals_the_library"),
    Row("best_of", True, "with `use_beam_search` (the beam width); otherwise only equal to "
        "`n`", _COMPAT + "test_beam_search_equals_the_library"),
    Row("messages[].content parts", True, "`[{\"type\": \"text\", ...}]` joined; image, "
        "audio and file parts are refused", _COMPAT + "test_content_parts_are_joined"),
    *(Row(name, False, _NO_TOOLS) for name in (
        "tools", "tool_choice", "parallel_tool_calls", "functions", "function_call",
        "messages[].tool_calls")),
    Row("reasoning_effort", False, "no reasoning parser; a model's own switch goes in "
        "`chat_template_kwargs` (e.g. `enable_thinking`)"),
    Row("chat_template", False, "the server renders with the model's own template"),
    Row("suffix", False, "fill-in-the-middle prompts"),
    Row("documents", False, "retrieval documents in the chat template"),
    Row("mm_processor_kwargs", False, "multimodal inputs (text-only models)"),
    Row("prompt_embeds", False, "embedding prompts"),
    Row("priority", False, "priority scheduling (the engine schedules first come, first "
        "served)"),
    Row("vllm_xargs", False, "vLLM's custom extension arguments"),
    Row("kv_transfer_params", False, "disaggregated serving"),
)

ROUTES: tuple[Row, ...] = (
    Row("POST /tokenize", True, "`{prompt}` or `{messages, add_generation_prompt, "
        "chat_template_kwargs}`, `add_special_tokens` -> `{count, max_model_len, tokens}`",
        _TOK + "test_tokenize_equals_the_tokenizer"),
    Row("POST /detokenize", True, "`{tokens}` -> `{prompt}`",
        _TOK + "test_detokenize_equals_the_tokenizer"),
    Row("GET /tokenizer_info", True, "the tokenizer's config: class, special tokens, chat "
        "template, `model_max_length` (lm-eval's remote tokenizer reads it)",
        _TOK + "test_tokenizer_info_is_the_tokenizer_config"),
    Row("GET /version", True, "`{version}`: metagen's", _TOK + "test_version"),
)

REFUSED: Mapping[str, str] = {r.name: r.note for r in FIELDS
                              if not r.supported and not r.name.startswith("messages")}


def refuse_unsupported(body: Mapping[str, Any]) -> None:
    """A 400 naming the first field of ``body`` (not null) that metagen refuses, with why."""
    for name in sorted(body):
        if name in REFUSED and body[name] is not None:
            raise unsupported(name, REFUSED[name])


def unsupported(param: str, why: str) -> ApiError:
    """The 400 for a known field (or value) metagen does not serve."""
    return bad_request(param, f"{param} is not supported by metagen: {why}",
                       code="unsupported_field")


def markdown() -> str:
    """The README's compatibility table (one line per row)."""
    lines = ["| vLLM field or route | metagen | how, or why not |", "|---|---|---|"]
    for row in (*FIELDS, *ROUTES):
        lines.append(f"| `{row.name}` | {'supported' if row.supported else 'refused (400)'} "
                     f"| {row.note} |")
    return "\n".join(lines)
