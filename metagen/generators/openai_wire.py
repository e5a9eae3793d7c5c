"""Request mapping and response parsing for OpenAI-compatible servers, as pure functions.

:func:`build_request` turns (prompt, :class:`SamplingParams`, sample index) into a path and a JSON
body for ONE sample (``n=1``): a string prompt goes to ``/v1/completions``, chat messages to
``/v1/chat/completions`` (a conversation ending with an assistant message is continued:
``continue_final_message``, as the local backends render it). Standard OpenAI fields are always
sent; the sampling extensions of vLLM, SGLang and llama.cpp's servers only to a server of
that :class:`Dialect` (to llama.cpp's servers also at metagen's defaults, since theirs differ).
A field the user set (not its default) that the dialect cannot honour raises
:class:`CapabilityError` naming it, before any request: nothing is dropped silently.

:func:`parse_response` validates one response body and returns a :class:`Completion` plus the
server's token counts, or raises :class:`BackendProtocolError` (never ``IndexError``/``KeyError``):
no or several choices, a null or missing text, an unknown ``finish_reason``, logprobs that do not
cover the tokens. A missing ``usage`` is accepted (the counts are then None). A server that does
not name the stop string that ended a completion (``stop_reason``; step search needs it) has it
read from the completion's tokens (:func:`matched_stop`; llama-cpp-python's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metagen.constraints import CONSTRAINT_FIELDS
from metagen.errors import BackendProtocolError, CapabilityError, InvalidParameterError
from metagen.generators.openai_structured import structured_fields, unsupported
from metagen.generators.base import Prompt, continues_assistant
from metagen.types import SEED_MAX, Completion, FinishReason, SamplingParams

COMPLETIONS = "/completions"
CHAT = "/chat/completions"

# SamplingParams field -> the server's name, per dialect, beyond the standard OpenAI fields.
_EXTENSIONS: dict[str, dict[str, str]] = {
    "openai": {},
    "vllm": {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
             "min_tokens": "min_tokens", "ignore_eos": "ignore_eos",
             "stop_token_ids": "stop_token_ids", "allowed_token_ids": "allowed_token_ids"},
    # metagen's own server: vLLM's wire, and metagen's SamplingParams fields under their names
    "metagen": {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
                "min_tokens": "min_tokens", "ignore_eos": "ignore_eos",
                "stop_token_ids": "stop_token_ids", "allowed_token_ids": "allowed_token_ids",
                "token_healing": "token_healing", "bad_words": "bad_words"},
    "sglang": {"top_k": "top_k", "min_p": "min_p", "repetition_penalty": "repetition_penalty",
               "min_tokens": "min_tokens", "ignore_eos": "ignore_eos",
               "stop_token_ids": "stop_token_ids"},
    "llamacpp": {"top_k": "top_k", "min_p": "min_p", "typical_p": "typical_p",
                 "repetition_penalty": "repeat_penalty", "ignore_eos": "ignore_eos"},
    # llama-cpp-python's server (``python -m llama_cpp.server``): its request model has no
    # typical_p / ignore_eos (and silently drops unknown fields), but applies min_tokens.
    "llamacpp-python": {"top_k": "top_k", "min_p": "min_p",
                        "repetition_penalty": "repeat_penalty", "min_tokens": "min_tokens"},
}
# Fields sent even at metagen's default, because the server's own default differs: llama.cpp's
# servers sample with top_k=40, top_p=0.95, min_p=0.05 unless told otherwise (and
# llama-cpp-python's with repeat_penalty=1.1, which changes even greedy text), so leaving them
# out would sample from another distribution than the one asked for.
_EXPLICIT: dict[str, frozenset[str]] = {
    name: frozenset({"top_p", "top_k", "min_p", "repetition_penalty"})
    for name in ("llamacpp", "llamacpp-python")}
# Fields every OpenAI-compatible server takes (mapped by hand in build_request).
_STANDARD = frozenset({"n", "temperature", "top_p", "presence_penalty", "frequency_penalty",
                       "seed", "stop", "max_tokens", "logprobs", "logit_bias"})
_DEFAULTS = SamplingParams()
_FINISH: dict[str, FinishReason] = {"stop": "stop", "eos": "stop", "tool_calls": "stop",
                                    "function_call": "stop", "length": "length",
                                    "abort": "abort", "content_filter": "abort"}


@dataclass(slots=True, frozen=True)
class Dialect:
    """Which server family we talk to: ``openai`` (standard fields only), ``vllm``, ``sglang``,
    ``llamacpp`` (llama.cpp's own server), ``llamacpp-python`` (llama-cpp-python's) or
    ``metagen`` (metagen's server: vLLM's wire plus metagen's own fields, e.g.
    ``token_healing``). Only vLLM's wire returns token ids (``return_tokens_as_token_ids``),
    which top-k logprobs need, since :class:`Completion` keys alternatives by token id."""

    name: str = "openai"

    def __post_init__(self) -> None:
        if self.name not in _EXTENSIONS:
            raise InvalidParameterError("dialect", self.name,
                                        f"must be one of {sorted(_EXTENSIONS)}")

    @property
    def wire(self) -> str:
        """The request and response format spoken: ``vllm`` for metagen's server, else the
        name."""
        return "vllm" if self.name == "metagen" else self.name

    @property
    def token_ids(self) -> bool:
        return self.wire == "vllm"

    @property
    def seeded(self) -> bool:
        return self.name != "openai"

    @property
    def stop_from_tokens(self) -> bool:
        """The server names no matched stop string (no ``stop_reason``) but its completions
        logprobs list the tokens up to the stop string's end: llama-cpp-python's."""
        return self.name == "llamacpp-python"


def dialect_from_models(data: Any) -> Dialect:
    """The dialect a ``GET /v1/models`` answer reveals (its ``owned_by``); ``openai`` if unsure.
    llama-cpp-python's server is known by its answer's shape: every model ``owned_by`` ``"me"``
    with a ``permissions`` list."""
    items = data.get("data") if isinstance(data, Mapping) else None
    models = [m for m in items or () if isinstance(m, Mapping)]
    owners = {str(m.get("owned_by", "")).lower() for m in models}
    if models and owners == {"me"} and all(isinstance(m.get("permissions"), list)
                                           for m in models):
        return Dialect("llamacpp-python")
    for name, marks in (("metagen", ("metagen",)), ("vllm", ("vllm",)), ("sglang", ("sglang",)),
                        ("llamacpp", ("llamacpp", "llama.cpp", "llama-cpp"))):
        if any(mark in owner for owner in owners for mark in marks):
            return Dialect(name)
    return Dialect("openai")


def _is_set(params: SamplingParams, name: str) -> bool:
    value, default = getattr(params, name), getattr(_DEFAULTS, name)
    if name == "top_k":
        return value not in (0, -1)
    if name in ("bad_words", "stop", "stop_token_ids"):
        return bool(value)
    return bool(value != default)


def check_supported(params: SamplingParams, dialect: Dialect) -> None:
    """Raise :class:`CapabilityError` naming every field set in ``params`` that ``dialect``
    cannot honour (including top-k logprobs without token ids)."""
    ext = _EXTENSIONS[dialect.name]
    lacking = [name for name in params.to_dict()
               if name not in _STANDARD and name not in ext and name not in CONSTRAINT_FIELDS
               and _is_set(params, name)]
    constraint = unsupported(params, dialect.wire)
    if constraint is not None:
        lacking.append(f"{constraint} (structured output)")
    if params.logprobs and not dialect.token_ids:
        lacking.append(f"logprobs={params.logprobs} (top-k alternatives need token ids)")
    if lacking:
        raise CapabilityError(f"a {dialect.name!r} server cannot honour {', '.join(lacking)}; "
                              "unset them or use a backend that supports them")


def check_prompt(prompt: Prompt, dialect: Dialect) -> None:
    """Raise :class:`CapabilityError` for a conversation ending with an assistant message (to be
    continued, not answered) on a server without ``continue_final_message`` (vLLM, SGLang)."""
    if continues_assistant(prompt) and dialect.wire not in ("vllm", "sglang"):
        raise CapabilityError(f"a {dialect.name!r} server cannot continue a final assistant "
                              "message (needs continue_final_message: vLLM, SGLang)")


def build_request(model: str, prompt: Prompt, params: SamplingParams, index: int,
                  dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """(path, body) of the request for sample ``index`` of ``prompt`` (``n=1``), seeded so that
    sample ``i`` depends on (seed, i) only: to metagen's server the seed itself and
    ``sample_index`` ``index`` (it draws the sample the built-in engine draws as sample
    ``index`` of ``seed``); to other servers the seed ``seed + index``. Call
    :func:`check_supported` first."""
    chat = not isinstance(prompt, str)
    body: dict[str, Any] = {"model": model, "n": 1, "max_tokens": params.max_tokens,
                            "temperature": 0.0 if params.is_greedy else params.temperature}
    if isinstance(prompt, str):
        body["prompt"] = prompt
    else:
        body["messages"] = [dict(m) for m in prompt]
        if continues_assistant(prompt):  # extend the assistant's message, as the local backends
            body.update(add_generation_prompt=False, continue_final_message=True)
    explicit = _EXPLICIT.get(dialect.name, frozenset())
    if params.top_p != 1.0 or "top_p" in explicit:
        body["top_p"] = params.top_p
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(params, name):
            body[name] = getattr(params, name)
    if params.seed is not None and dialect.name == "metagen":
        body["seed"], body["sample_index"] = params.seed, index
    elif params.seed is not None:
        body["seed"] = (params.seed + index) % (SEED_MAX + 1)
    if params.stop:
        body["stop"] = list(params.stop)
    if params.logit_bias:
        body["logit_bias"] = {str(k): v for k, v in params.logit_bias.items()}
    if params.logprobs is not None:
        if chat:
            body["logprobs"] = True
            body["top_logprobs"] = params.logprobs
        else:
            body["logprobs"] = params.logprobs
        if dialect.token_ids:
            body["return_tokens_as_token_ids"] = True
    elif params.stop and not chat and dialect.stop_from_tokens:
        body["logprobs"] = 0  # its tokens show which stop string ended the text (matched_stop)
    for name, wire in _EXTENSIONS[dialect.name].items():
        if _is_set(params, name) or name in explicit:
            value = getattr(params, name)
            if name == "top_k":  # 0 and -1 both disable top-k here; llama.cpp takes 0
                value = max(value, 0)
            body[wire] = list(value) if isinstance(value, tuple) else value
    body.update(structured_fields(params, dialect.wire))
    if dialect.wire == "vllm":
        body["include_stop_str_in_output"] = False
    return (CHAT if chat else COMPLETIONS), body


@dataclass(slots=True, frozen=True)
class Parsed:
    """One validated response: the completion and the server's token counts (None if absent)."""

    completion: Completion
    prompt_tokens: int | None
    completion_tokens: int | None


def _fail(message: str) -> BackendProtocolError:
    return BackendProtocolError(f"invalid response: {message}")


def parse_response(data: Any, chat: bool, want_logprobs: bool,
                   stops: Sequence[str] = ()) -> Parsed:
    """Validate one ``n=1`` response body (already JSON-decoded). See the module docstring.
    ``stops`` (the request's stop strings) name the matched one (``stop_reason``) when the
    server does not (:func:`matched_stop`)."""
    if not isinstance(data, Mapping):
        raise _fail("not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], Mapping):
        count = len(choices) if isinstance(choices, list) else "no"
        raise _fail(f"expected 1 choice (n=1), got {count}")
    choice = choices[0]
    if chat:
        message = choice.get("message")
        text = message.get("content") if isinstance(message, Mapping) else None
    else:
        text = choice.get("text")
    if not isinstance(text, str):
        raise _fail(f"the completion text is {type(text).__name__}, not a string")
    raw_finish = choice.get("finish_reason")
    finish = _FINISH.get(raw_finish) if isinstance(raw_finish, str) else None
    if finish is None:
        raise _fail(f"unknown finish_reason {raw_finish!r}")
    stop_reason = choice.get("stop_reason")
    if finish == "stop" and stop_reason is None and stops and not chat:
        stop_reason = matched_stop(choice.get("logprobs"), text, stops)
    token_ids, logprobs, top = _logprobs(choice.get("logprobs"), chat) if want_logprobs \
        else ((), None, None)
    prompt_tokens, completion_tokens = _usage(data.get("usage"))
    if logprobs is not None and completion_tokens is not None \
            and len(logprobs) != completion_tokens:
        raise _fail(f"{len(logprobs)} logprobs for {completion_tokens} tokens")
    completion = Completion(
        text=text, token_ids=token_ids, logprobs=logprobs,
        cumulative_logprob=None if logprobs is None else float(sum(logprobs)),
        finish_reason=finish, top_logprobs=top,
        stop_reason=stop_reason if isinstance(stop_reason, (str, int)) else None,
        generated_tokens=None if token_ids else completion_tokens)
    return Parsed(completion, prompt_tokens, completion_tokens)


def matched_stop(block: Any, text: str, stops: Sequence[str]) -> str | None:
    """The stop string that ended ``text``, read from a completions ``logprobs`` block whose
    ``tokens`` run past the text to the end of the stop string (llama-cpp-python's); the first
    of ``stops`` the overhang starts with. None when the tokens end with the text (an
    end-of-sequence stop) or do not extend it."""
    tokens = block.get("tokens") if isinstance(block, Mapping) else None
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        return None
    joined = "".join(tokens)
    if not joined.startswith(text):
        return None
    rest = joined[len(text):]
    return next((s for s in stops if rest and rest.startswith(s)), None)


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, Mapping):
        return None, None
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    ok = [isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in (p, c)]
    return (p if ok[0] else None), (c if ok[1] else None)


def _token_id(token: Any) -> int | None:
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token[len("token_id:"):])
        except ValueError:
            return None
    return None


def _logprobs(block: Any, chat: bool
              ) -> tuple[tuple[int, ...], tuple[float, ...], tuple[dict[int, float], ...] | None]:
    """(token ids, logprobs, top alternatives) from a completions or chat ``logprobs`` block."""
    if not isinstance(block, Mapping):
        raise _fail("logprobs were requested but the response has none")
    tokens: list[Any]
    values: list[Any]
    tops: list[Any]
    if chat:
        content = block.get("content")
        if not isinstance(content, list) or not all(isinstance(e, Mapping) for e in content):
            raise _fail("chat logprobs.content is not a list of objects")
        tokens = [e.get("token") for e in content]
        values = [e.get("logprob") for e in content]
        tops = [{t.get("token"): t.get("logprob") for t in e.get("top_logprobs") or ()
                 if isinstance(t, Mapping)} for e in content]
    else:
        raw: list[Any] = [block.get("tokens"), block.get("token_logprobs"),
                          block.get("top_logprobs") or []]
        if not all(isinstance(x, list) for x in raw):
            raise _fail("completions logprobs lack tokens / token_logprobs lists")
        tokens, values, tops = raw
    if len(values) != len(tokens) or (tops and len(tops) != len(tokens)):
        raise _fail(f"logprobs cover {len(values)} of {len(tokens)} tokens")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise _fail("a token logprob is not a number")
    ids = [_token_id(t) for t in tokens]
    token_ids = tuple(i for i in ids if i is not None) if all(i is not None for i in ids) else ()
    top: tuple[dict[int, float], ...] | None = None
    if token_ids and tops:
        top = tuple(_top_by_id(d) for d in tops)
    return token_ids, tuple(float(v) for v in values), top


def _top_by_id(entry: Any) -> dict[int, float]:
    if not isinstance(entry, Mapping):
        raise _fail("a top_logprobs entry is not an object")
    out: dict[int, float] = {}
    for token, value in entry.items():
        tid = _token_id(token)
        if tid is None or not isinstance(value, (int, float)):
            raise _fail(f"top_logprobs entry {token!r}: {value!r} is not token_id:N -> number")
        out[tid] = float(value)
    return out


def build_score_request(model: str, prompt: str, continuation: str) -> dict[str, Any]:
    """The ``/completions`` body that scores ``prompt + continuation`` without generating
    (``echo``, ``logprobs=0``, ``max_tokens=0``: vLLM's prompt-only echo)."""
    return {"model": model, "prompt": prompt + continuation, "echo": True, "logprobs": 0,
            "max_tokens": 0, "temperature": 0.0, "n": 1}


def parse_token_logprobs(data: Any, boundary: int, total: int
                         ) -> tuple[list[float], int | None]:
    """(the continuation's token log-probs, the server's prompt token count) from an echo
    response.

    The continuation's tokens are those that end after character ``boundary`` (the prompt's
    length) of the ``total``-character text: a token merging across the boundary counts for the
    continuation, as the local backends do. Token spans come from ``text_offset``, which both
    servers compute as the summed lengths of the token names before; vLLM names a special
    token by its text (``<bos>``, ``<s>``) although the echoed text leaves it out, so when the
    names spell the echoed text after such a prefix, the offsets are read from the prefix's
    end. Names that spell neither are refused (``BackendProtocolError``): token spans that
    cannot be placed in the text would score the wrong tokens."""
    if not isinstance(data, Mapping):
        raise _fail("not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], Mapping):
        raise _fail("expected 1 choice for a scoring request")
    block = choices[0].get("logprobs")
    if not isinstance(block, Mapping):
        raise _fail("the echo response has no logprobs")
    values, offsets = block.get("token_logprobs"), block.get("text_offset")
    if not isinstance(values, list) or not isinstance(offsets, list) \
            or len(values) != len(offsets) or not values:
        raise _fail("echo logprobs need token_logprobs and text_offset of equal length")
    if not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets):
        raise _fail("text_offset holds a non-integer")
    shift = _names_shift(choices[0].get("text"), block.get("tokens"), offsets)
    if shift:
        offsets = [o - shift for o in offsets]
    ends = [*offsets[1:], total]
    out: list[float] = []
    for value, start, end in zip(values, offsets, ends):
        if start >= total:  # a generated token after the echoed text (max_tokens ignored)
            break
        if end <= boundary:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _fail(f"a scored token has logprob {value!r}")
        out.append(float(value))
    prompt_tokens, _ = _usage(data.get("usage"))
    return out, prompt_tokens


def _names_shift(text: Any, names: Any, offsets: list[int]) -> int:
    """Where the echoed ``text`` starts in the concatenated token ``names`` (0, or the length of
    leading special-token names the text leaves out); 0 when either is missing or names are
    token ids. See :func:`parse_token_logprobs`."""
    if not isinstance(text, str) or not text or not isinstance(names, list) \
            or not all(isinstance(n, str) for n in names) \
            or any(n.startswith("token_id:") for n in names):
        return 0
    joined = "".join(names)
    if joined.startswith(text):  # names spell the text (a generated tail may follow)
        return 0
    start = joined.find(text)
    if start <= 0 or start not in offsets:
        raise _fail("the echoed token names do not spell the echoed text, so the "
                    "continuation's tokens cannot be placed in it")
    return start


def parse_score(data: Any, boundary: int, total: int) -> tuple[float, int | None]:
    """(log p(continuation | prompt), the server's prompt token count) from an echo response:
    the sum of :func:`parse_token_logprobs`."""
    values, prompt_tokens = parse_token_logprobs(data, boundary, total)
    return sum(values), prompt_tokens


__all__ = ["CHAT", "COMPLETIONS", "Dialect", "Parsed", "build_request", "check_prompt",
           "check_supported",
           "build_score_request", "dialect_from_models", "matched_stop", "parse_response",
           "parse_score", "parse_token_logprobs"]
