"""The Generator protocol: what every backend (engine, transformers, server, mock) implements.

A generator turns a batch of prompts into ``n`` completions per prompt in **one** call and keeps a
cumulative :class:`~metagen.types.Usage` counter; a caller measures the compute of its own calls as
``usage_after - usage_before``. What a backend can do is declared in :class:`Capabilities`, and an
algorithm that needs more calls :func:`require` first so it fails at once, before any model call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol, Union, runtime_checkable

from metagen.errors import CapabilityError, InvalidPromptError
from metagen.types import Completion, SamplingParams, Usage

ChatMessage = Mapping[str, str]
Prompt = Union[str, Sequence[ChatMessage]]


@dataclass(slots=True, frozen=True)
class Capabilities:
    """What a generator can do. Algorithms check these instead of guessing.

    ``thread_safe`` is the generator's promise that ``generate`` (and ``score``, where it has
    one) may be called from several threads at once, each call's outputs and the ``usage``
    total being what the calls would give one after another (up to the batch-composition
    rounding a backend documents). Callers that fan items out over threads (the eval runner's
    ``concurrency``) read it and do one item at a time without it; it defaults to False, so a
    generator (or a wrapper around one) is serial unless it says otherwise."""

    logits: bool = False          # per-step logits access (custom processors, contrastive decoding)
    logprobs: bool = False        # per-token logprobs and top-k alternatives in completions
    prompt_scoring: bool = False  # ``score(prompts, continuations)``
    prefix_cache: bool = False    # shared prompt prefixes are not recomputed across calls
    constraints: bool = False     # constrained decoding (allowed ids, grammars)
    seeded: bool = True           # per-request seeds give reproducible samples
    flops: bool = True            # ``usage`` FLOPs are known (False: NaN, e.g. a remote server
    #                               whose parameter count was not declared)
    thread_safe: bool = False     # concurrent calls from several threads are safe (see above)

    def missing(self, *names: str) -> list[str]:
        known = {f.name for f in fields(self)}
        for name in names:
            if name not in known:
                raise ValueError(f"unknown capability {name!r}; known: {sorted(known)}")
        return [name for name in names if not getattr(self, name)]


def require(generator: Any, *names: str, why: str = "") -> None:
    """Raise :class:`CapabilityError` unless ``generator`` has every named capability."""
    caps = getattr(generator, "capabilities", None)
    if not isinstance(caps, Capabilities):
        raise CapabilityError(f"{type(generator).__name__} declares no capabilities")
    lacking = caps.missing(*names)
    if lacking:
        reason = f" ({why})" if why else ""
        raise CapabilityError(
            f"{type(generator).__name__} lacks capability {', '.join(lacking)}{reason}")


@runtime_checkable
class Generator(Protocol):
    """A batched text generator.

    ``generate(prompts, params)`` returns ``len(prompts)`` lists of ``params.n`` completions each,
    in prompt order, from one batched call. It raises ``InvalidParameterError`` (a ``ValueError``)
    for requests it cannot serve, before doing any work.
    """

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def usage(self) -> Usage: ...

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        ...


@runtime_checkable
class ScoringGenerator(Generator, Protocol):
    """A generator that can also score given continuations (capability ``prompt_scoring``)."""

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j]`` = log p(continuations[i][j] | prompts[i]), summed over its tokens."""
        ...


def check_prompts(prompts: Any) -> list[Prompt]:
    """Validate the shape of a prompt batch (not its tokens). Raises ``InvalidPromptError``."""
    if isinstance(prompts, (str, bytes)) or not isinstance(prompts, Sequence):
        raise InvalidPromptError("prompts", prompts, "must be a list of prompts")
    if not prompts:
        raise InvalidPromptError("prompts", prompts, "must not be empty")
    out: list[Prompt] = []
    for prompt in prompts:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidPromptError("prompt", prompt, "must not be empty")
        elif isinstance(prompt, Sequence) and prompt and all(
                isinstance(m, Mapping) and isinstance(m.get("content"), str)
                and isinstance(m.get("role"), str) for m in prompt):
            pass
        else:
            raise InvalidPromptError(
                "prompt", prompt, "must be a non-empty string or a non-empty list of "
                "{'role': str, 'content': str} messages")
        out.append(prompt)
    return out


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """The text of a prompt: a string as is; chat messages through the tokenizer's chat template.

    A conversation ending with an assistant message is *continued*: the template renders that
    message open (``continue_final_message``, no end-of-turn), and the model extends it -- how
    step searches grow a chat model's partial answer (:func:`extend_prompt`). Any other
    conversation gets the template's generation prompt (a new assistant turn).

    Raises ``InvalidPromptError`` when messages are given and the tokenizer has no chat template.
    """
    if isinstance(prompt, str):
        return prompt
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidPromptError(
            "prompt", "<chat messages>", "this model's tokenizer has no chat template; "
            "pass a plain string prompt instead")
    messages = [dict(m) for m in prompt]
    if continues_assistant(prompt):
        return str(tokenizer.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=False,
                                                 continue_final_message=True))
    return str(tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=True))


def continues_assistant(prompt: Prompt) -> bool:
    """Whether ``prompt`` is a conversation whose last message is the assistant's (to extend)."""
    return not isinstance(prompt, str) and bool(prompt) and prompt[-1].get("role") == "assistant"


def extend_prompt(prompt: Prompt, text: str) -> Prompt:
    """``prompt`` followed by ``text`` as the model's own output so far: a string is
    concatenated; a conversation gets ``text`` as (the end of) its assistant message, which
    generators then continue (see :func:`render_prompt`). An empty ``text`` changes nothing."""
    if not text:
        return prompt
    if isinstance(prompt, str):
        return prompt + text
    return with_answer(prompt, text)


def with_answer(messages: Sequence[ChatMessage], text: str) -> list[dict[str, str]]:
    """A copy of ``messages`` with ``text`` as the assistant's answer: appended to a final
    assistant message, else a new assistant message (even when ``text`` is empty)."""
    out = [dict(m) for m in messages]
    if continues_assistant(messages):
        out[-1]["content"] = out[-1]["content"] + text
    else:
        out.append({"role": "assistant", "content": text})
    return out
