"""Request bodies of ``/v1/completions`` and ``/v1/chat/completions`` -> :class:`GenerationRequest`.

Field policy (V21): a field this server does not know is a 400 naming it (typos), never silently
ignored, and one it knows but does not serve (``tools``, ``suffix``, ...) a 400 saying it "is not
supported by metagen" (:mod:`metagen.server.vllm_compat`, the one table); ``null`` means "not
given". vLLM's ``add_special_tokens``, ``skip_special_tokens``, ``truncate_prompt_tokens``,
``chat_template_kwargs`` and ``use_beam_search`` are read by :mod:`metagen.server.vllm_fields`;
chat content parts of type text are joined. Sampling fields are the OpenAI ones
plus vLLM's extensions (``top_k``, ``min_p``, ``repetition_penalty``, ``min_tokens``,
``ignore_eos``, ``stop_token_ids``, ``allowed_token_ids``, ``include_stop_str_in_output``,
``return_tokens_as_token_ids``, ``echo`` / ``prompt_logprobs``, ``add_generation_prompt`` /
``continue_final_message``), ``sample_index`` (metagen's: the first sample's index under
``seed``, :func:`sample_index`), structured output (vLLM's ``structured_outputs`` and
``guided_*``, OpenAI's ``response_format``: :mod:`metagen.server.structured`), ``metagen`` (a
strategy, :mod:`metagen.server.strategy`) and
metagen's own :class:`SamplingParams` fields by name. Values go
to :class:`SamplingParams` unconverted, so a bad one (a string for a number, ``top_p`` 1.5, ``n``
0) is the same typed error as in Python, answered as a 400 naming the field as the client spelt
it.

Defaults: ``max_tokens`` 16 for completions (OpenAI's), for chat what the context leaves after
the longest prompt. ``max_tokens`` 0 is allowed only with ``echo`` (prompt scoring: no
generation, as vLLM's). Logprobs as OpenAI and vLLM give them: ``echo`` with ``logprobs`` k
puts the prompt's tokens first in the block (the first token's logprob and alternatives None,
the others with their k top alternatives); ``prompt_logprobs`` k (vLLM's) adds a choice field
with each prompt token's logprob, rank and k alternatives (on chat, as vLLM: a top-level field
for the rendered conversation, refused with ``stream``); with ``stream`` each chunk carries the
logprobs of its own tokens.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metagen.beam_params import BeamSearchParams
from metagen.errors import InvalidParameterError
from metagen.generators.tokenize import encode_text
from metagen.server import vllm_fields as vf
from metagen.server.errors import ApiError, bad_request
from metagen.server.structured import STRUCTURED_FIELDS, constraint_fields
from metagen.server.vllm_compat import refuse_unsupported, unsupported
from metagen.types import MAX_LOGPROBS, MAX_TOKENS_CAP, SEED_MAX, SamplingParams

COMPLETION_DEFAULT_MAX_TOKENS = 16
# SamplingParams fields taken from the body under their own names
_DIRECT = ("n", "temperature", "top_p", "top_k", "min_p", "typical_p", "epsilon_cutoff",
           "eta_cutoff", "mirostat_tau", "mirostat_eta", "repetition_penalty",
           "presence_penalty", "frequency_penalty", "no_repeat_ngram_size", "allowed_token_ids",
           "bad_words", "min_tokens", "stop", "stop_token_ids", "ignore_eos", "seed",
           "token_healing")
_COMMON = frozenset(_DIRECT) | {"model", "max_tokens", "logit_bias", "stream", "stream_options",
                                "user", "include_stop_str_in_output",
                                "return_tokens_as_token_ids", "logprobs", "metagen",
                                "sample_index", *STRUCTURED_FIELDS, *vf.VLLM_FIELDS}
COMPLETION_FIELDS = _COMMON | {"prompt", "echo", "prompt_logprobs"}
CHAT_FIELDS = _COMMON | {"messages", "top_logprobs", "max_completion_tokens",
                         "add_generation_prompt", "continue_final_message", "prompt_logprobs",
                         "chat_template_kwargs"}
_MESSAGE_KEYS = frozenset({"role", "content", "name"})
_TOOL_KEYS = frozenset({"tool_calls", "tool_call_id", "function_call"})
_TEXT_PARTS = frozenset({"text", "input_text"})
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


@dataclass(slots=True, frozen=True)
class GenerationRequest:
    """One validated request: ``prompts`` (token ids) with the text each reads as, the sampling
    parameters shared by all, and how to answer (stream, echo, token naming)."""

    chat: bool
    prompts: list[list[int]]
    prompt_texts: list[str]
    params: SamplingParams
    generate: bool = True  # False: echo with max_tokens 0 (the prompt's logprobs only)
    stream: bool = False
    include_usage: bool = False
    echo: bool = False
    prompt_logprobs: int | None = None  # vLLM's field: alternatives per prompt token
    tokens_as_ids: bool = False
    include_stop: bool = False
    messages: list[dict[str, str]] | None = None  # a chat request's conversation
    wire_names: Mapping[str, str] | None = None  # SamplingParams field -> the client's name
    first_sample: int = 0  # metagen's sample_index: sample j draws as sample first_sample + j
    beam: BeamSearchParams | None = None  # vLLM's use_beam_search: run this instead of params
    skip_special: bool = True  # vLLM's skip_special_tokens

    @property
    def run_params(self) -> SamplingParams | BeamSearchParams:
        """What the engine runs: the beam search, or the sampling parameters."""
        return self.beam if self.beam is not None else self.params

    @property
    def echo_logprobs(self) -> bool:
        """Whether the echoed prompt's tokens lead the ``logprobs`` block."""
        return self.echo and self.params.logprobs is not None

    @property
    def prompt_top(self) -> int | None:
        """How many alternatives per prompt token the answer needs (None: no prompt reading)."""
        if not self.echo_logprobs and self.prompt_logprobs is None:
            return None
        echo_k = (self.params.logprobs or 0) if self.echo_logprobs else 0
        return max(echo_k, self.prompt_logprobs or 0)


def flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    if not isinstance(value, bool):
        raise bad_request(name, f"{name} must be true or false, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:80] + "..."


def check_fields(body: Mapping[str, Any], known: frozenset[str]) -> dict[str, Any]:
    unknown = sorted(k for k in body if k not in known)
    if unknown:
        listed = ", ".join(repr(k[:40]) for k in unknown[:10])
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise bad_request(unknown[0][:80], f"unknown field(s) {listed}{more}; this server "
                          "refuses fields it would otherwise ignore", code="unknown_field")
    return {k: v for k, v in body.items() if v is not None}


def check_model(body: Mapping[str, Any], served: str) -> None:
    model = body.get("model")
    if model is None:
        raise bad_request("model", "model is required")
    if model != served:
        raise ApiError(404, f"the model {_shown(model)} does not exist; this server serves "
                       f"{served!r}", param="model", code="model_not_found")


def _logit_bias(value: Any) -> dict[int, Any]:
    if not isinstance(value, dict):
        raise bad_request("logit_bias", "logit_bias must map token ids to biases")
    out: dict[int, Any] = {}
    for key, bias in value.items():
        try:
            out[int(key)] = bias
        except ValueError:
            raise bad_request("logit_bias", f"logit_bias key {_shown(key)} is not a token "
                              "id") from None
    return out


def sampling_params(body: Mapping[str, Any], max_tokens: int, logprobs: int | None,
                    renamed: Mapping[str, str]) -> tuple[SamplingParams, dict[str, str]]:
    """``SamplingParams`` from the body's fields, and the wire names of its constraint fields
    (for the backend's later refusals); a refusal here is a 400 naming the field as the client
    spelt it (``renamed`` maps SamplingParams names to wire names)."""
    kwargs: dict[str, Any] = {k: body[k] for k in _DIRECT if k in body}
    if "logit_bias" in body:
        kwargs["logit_bias"] = _logit_bias(body["logit_bias"])
    constraint, wire = constraint_fields(body)
    kwargs.update(constraint)
    renamed = {**renamed, **wire}
    try:
        return SamplingParams(max_tokens=max_tokens, logprobs=logprobs, **kwargs), wire
    except InvalidParameterError as exc:
        raise bad_request(renamed.get(exc.param, exc.param), str(exc)) from None
    except (TypeError, ValueError) as exc:  # a value of a type no check expected
        raise bad_request(None, f"invalid sampling parameters: {str(exc)[:200]}") from None


def _max_tokens(body: Mapping[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise bad_request(name, f"{name} must be an integer, got {_shown(value)}")
    return value


def _stream_options(body: Mapping[str, Any], stream: bool) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not stream:
        raise bad_request("stream_options", "stream_options is only allowed with stream: true")
    if not isinstance(options, dict) or set(options) - {"include_usage",
                                                         "continuous_usage_stats"}:
        raise bad_request("stream_options", "stream_options must be {\"include_usage\": bool}")
    return flag(options, "include_usage", False)


def completion_request(body: Mapping[str, Any], tokenizer: Any, max_prompts: int,
                       max_model_len: int | None = None) -> GenerationRequest:
    """A ``/v1/completions`` body (``model`` already checked); ``max_model_len`` bounds
    ``truncate_prompt_tokens`` (default: the tokenizer's ``model_max_length``)."""
    refuse_unsupported(body)
    body = check_fields(body, COMPLETION_FIELDS)
    beam = vf.wants_beam(body)
    prompts, texts = _prompts(body.get("prompt"), tokenizer, max_prompts,
                              flag(body, "add_special_tokens", True))
    keep = vf.truncation(body, max_model_len or int(tokenizer.model_max_length))
    if keep is not None:
        texts = [t if len(ids) <= keep else "" for ids, t in zip(prompts, texts)]
        prompts = [vf.truncated(ids, keep) for ids in prompts]
    echo = flag(body, "echo", False)
    stream = flag(body, "stream", False)
    logprobs = body.get("logprobs")
    if logprobs is not None and (not isinstance(logprobs, int) or isinstance(logprobs, bool)
                                 or not 0 <= logprobs <= MAX_LOGPROBS):
        raise bad_request("logprobs", f"logprobs must be an integer in [0, {MAX_LOGPROBS}], "
                          f"got {_shown(logprobs)}")
    prompt_lp = _prompt_logprobs(body)
    max_tokens = _max_tokens(body, "max_tokens", COMPLETION_DEFAULT_MAX_TOKENS)
    generate = not (echo and max_tokens == 0)
    params, wire = sampling_params(body, max_tokens if generate else 1, logprobs, {})
    return GenerationRequest(
        chat=False, prompts=prompts, prompt_texts=texts, params=params, generate=generate,
        stream=stream, include_usage=_stream_options(body, stream), echo=echo,
        prompt_logprobs=prompt_lp,
        tokens_as_ids=flag(body, "return_tokens_as_token_ids", False),
        include_stop=flag(body, "include_stop_str_in_output", False),
        wire_names={**wire, **vf.beam_wire_names(body)} if beam else wire,
        first_sample=sample_index(body),
        beam=vf.beam_params(body, params.n, max_tokens) if beam else None,
        skip_special=vf.skip_special(body))


def sample_index(body: Mapping[str, Any]) -> int:
    """metagen's ``sample_index`` (default 0): the index, under the request's ``seed``, of its
    first sample; sample ``j`` of the request draws as sample ``sample_index + j``, so ``n``
    one-sample requests with ``sample_index`` 0 .. n-1 give the samples of one request with
    ``n`` (what ``OpenAIGenerator`` sends, one request per sample)."""
    value = body.get("sample_index", 0)
    if (not isinstance(value, int) or isinstance(value, bool)
            or not 0 <= value <= SEED_MAX):
        raise bad_request("sample_index", f"sample_index must be an integer in "
                          f"[0, {SEED_MAX}], got {_shown(value)}")
    return value


def _prompt_logprobs(body: Mapping[str, Any]) -> int | None:
    """vLLM's ``prompt_logprobs`` k: None, or an integer in [0, MAX_LOGPROBS]."""
    value = body.get("prompt_logprobs")
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                              or not 0 <= value <= MAX_LOGPROBS):
        raise bad_request("prompt_logprobs", f"prompt_logprobs must be an integer in "
                          f"[0, {MAX_LOGPROBS}], got {_shown(value)}")
    return value


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool)
                                           for t in value)


def _prompts(prompt: Any, tokenizer: Any, max_prompts: int, special: bool = True
             ) -> tuple[list[list[int]], list[str]]:
    """(token ids, text) of each prompt: a string (tokenized with the tokenizer's special tokens
    when ``special``), a list of strings, a list of token ids or a list of such lists."""
    if prompt is None:
        raise bad_request("prompt", "prompt is required")
    if isinstance(prompt, str) or (_is_ids(prompt) and prompt):
        items: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise bad_request("prompt", "prompt must be a non-empty string, list of strings, list "
                          "of token ids or list of token-id lists")
    if len(items) > max_prompts:
        raise bad_request("prompt", f"at most {max_prompts} prompts per request, got "
                          f"{len(items)}")
    ids: list[list[int]] = []
    texts: list[str] = []
    for item in items:
        if isinstance(item, str):
            try:
                ids.append(encode_text(tokenizer, item, add_special_tokens=special))
            except InvalidParameterError as exc:
                raise bad_request("prompt", str(exc)) from None
            texts.append(item)
        elif _is_ids(item) and item:
            ids.append(list(item))  # checked against the vocabulary by the engine
            texts.append("")  # filled once the ids are known to be valid
        else:
            raise bad_request("prompt", f"prompt item {_shown(item)} is not a non-empty string "
                              "or a non-empty list of token ids")
    return ids, texts


def chat_request(body: Mapping[str, Any], tokenizer: Any, max_model_len: int,
                 max_messages: int) -> GenerationRequest:
    """A ``/v1/chat/completions`` body (``model`` already checked)."""
    refuse_unsupported(body)
    body = check_fields(body, CHAT_FIELDS)
    beam = vf.wants_beam(body)
    messages = parse_messages(body.get("messages"), max_messages)
    add_prompt = flag(body, "add_generation_prompt", True)
    cont = flag(body, "continue_final_message", False)
    if cont and add_prompt:
        raise bad_request("continue_final_message", "continue_final_message and "
                          "add_generation_prompt cannot both be true")
    if cont and messages[-1]["role"] != "assistant":
        raise bad_request("continue_final_message", "continue_final_message needs a final "
                          "assistant message to continue")
    kwargs = vf.chat_template_kwargs(body)
    text = render_chat(tokenizer, messages, add_prompt, cont, kwargs)
    try:
        ids = encode_text(tokenizer, text, add_special_tokens=flag(body, "add_special_tokens",
                                                                    False), param="messages")
    except InvalidParameterError as exc:
        raise bad_request("messages", str(exc)) from None
    keep = vf.truncation(body, max_model_len)
    if keep is not None and len(ids) > keep:
        ids, text = vf.truncated(ids, keep), ""  # the text: the kept tokens' (filled later)
    stream = flag(body, "stream", False)
    prompt_lp = _prompt_logprobs(body)
    if stream and prompt_lp is not None:
        raise bad_request("prompt_logprobs", "prompt_logprobs is not available with stream: "
                          "true on /v1/chat/completions (as vLLM)")
    want = flag(body, "logprobs", False)
    top = body.get("top_logprobs")
    if top is not None and not want:
        raise bad_request("top_logprobs", "top_logprobs needs logprobs: true")
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    left = max(1, min(max_model_len - len(ids), MAX_TOKENS_CAP))
    max_tokens = _max_tokens(body, name, left)
    params, wire = sampling_params(body, max_tokens,
                                   (0 if top is None else top) if want else None,
                                   {"logprobs": "top_logprobs", "max_tokens": name})
    return GenerationRequest(
        chat=True, prompts=[ids], prompt_texts=[text], params=params, stream=stream,
        include_usage=_stream_options(body, stream), prompt_logprobs=prompt_lp,
        tokens_as_ids=flag(body, "return_tokens_as_token_ids", False),
        include_stop=flag(body, "include_stop_str_in_output", False), messages=messages,
        wire_names={**wire, **vf.beam_wire_names(body)} if beam else wire,
        first_sample=sample_index(body),
        beam=vf.beam_params(body, params.n, max_tokens) if beam else None,
        skip_special=vf.skip_special(body))


def parse_messages(value: Any, max_messages: int) -> list[dict[str, str]]:
    """The conversation as ``{"role", "content"}`` dicts: text content parts joined, keys with
    ``null`` values ignored (the openai SDK's messages carry them); tool calls and non-text
    parts are refused as not supported, other keys as unknown."""
    if not isinstance(value, list) or not value:
        raise bad_request("messages", "messages must be a non-empty list")
    if len(value) > max_messages:
        raise bad_request("messages", f"at most {max_messages} messages, got {len(value)}")
    out: list[dict[str, str]] = []
    for i, message in enumerate(value):
        if isinstance(message, dict):
            message = {k: v for k, v in message.items() if v is not None}
            tool = sorted(set(message) & _TOOL_KEYS)
            if tool:
                raise unsupported(f"messages[{i}].{tool[0]}", "tool calling: metagen has no "
                                  "tool-call parser")
        if not isinstance(message, dict) or set(message) - _MESSAGE_KEYS:
            raise bad_request("messages", f"messages[{i}] must be an object with role and "
                              "content (and optionally name)")
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise bad_request("messages", f"messages[{i}].role must be one of {sorted(_ROLES)}")
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = _joined_parts(content, i)
        if not isinstance(content, str):
            raise bad_request("messages", f"messages[{i}].content must be a string")
        out.append({"role": role, "content": content})
    return out


def _joined_parts(parts: list[Any], i: int) -> str:
    """The text of content parts (OpenAI's and vLLM's ``text`` type); other types refused."""
    texts = []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if isinstance(kind, str) and kind not in _TEXT_PARTS:
            raise unsupported(f"messages[{i}].content", f"{kind[:40]!r} content parts "
                              "(metagen serves text-only models; text parts are joined)")
        if not isinstance(kind, str) or not isinstance(part.get("text"), str):
            raise bad_request("messages", f"messages[{i}].content parts must be "
                              "{\"type\": \"text\", \"text\": str}")
        texts.append(part["text"])
    return "".join(texts)


def render_chat(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool,
                continue_final_message: bool, template_kwargs: Mapping[str, Any] | None = None
                ) -> str:
    """The conversation through the tokenizer's chat template (400 when it has none), with
    ``template_kwargs`` (vLLM's ``chat_template_kwargs``) as extra template variables."""
    if not getattr(tokenizer, "chat_template", None):
        raise bad_request("messages", "this model's tokenizer has no chat template; use "
                          "/v1/completions with a text prompt")
    try:
        return str(tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, **(template_kwargs or {})))
    except Exception as exc:  # noqa: BLE001 -- a template error is the conversation's fault
        raise bad_request("messages", f"the chat template cannot render these messages: "
                          f"{str(exc)[:200]}") from None
