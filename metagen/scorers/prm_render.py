"""Lay a prompt and its steps out as the text a reward model reads, and find its score positions.

:func:`render_steps` (step-tag, chat-turns, separator) and :func:`render_response` (generative)
return a :class:`Rendered`: the text, the character offsets where scores are read, and the text
before the response (so rows with one prompt can share its forward pass). Chat-message prompts,
and string prompts of a chat format, go through the tokenizer's own chat template
(``apply_chat_template``), never a join of the messages.

:func:`layout` is the plain layout of the reward models without a declared format
(:class:`~metagen.scorers.HFRewardModel`, :class:`~metagen.scorers.HFProcessRewardModel`, the
likelihood verifier): ``prompt + response`` for a string prompt; for chat messages the
tokenizer's chat template with the response as the assistant's turn.

:func:`token_positions` maps the character offsets to token indices:

- ``read="at"``: the token holding the character just before the offset (the tag's or the
  separator's last token; the last token of a generative verifier's input);
- ``read="before"``: the token before the one that starts exactly at the offset (the position
  that predicts an assistant reply); a reply token merged with the text before it is an
  :class:`~metagen.errors.InvalidPromptError`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

from metagen.errors import InvalidPromptError, ModelLoadError
from metagen.generators.base import with_answer
from metagen.scorers.prm_format import PRMFormat

Message = Mapping[str, str]
PromptLike = Union[str, Sequence[Message]]
ReadAt = Literal["at", "before"]

_SENTINEL = "\ue000"  # a private-use character: finds where the response starts in a rendering
_PLACEHOLDER = re.compile(r"\{prompt\}|\{response\}")


@dataclass(frozen=True, slots=True)
class Rendered:
    """``text`` to tokenize (without the tokenizer's special tokens when ``chat``), the character
    offsets ``ends`` of its scores read as ``read`` says, and ``prefix``: the leading text that
    does not depend on the response ("" when unknown)."""

    text: str
    ends: list[int]
    prefix: str
    chat: bool
    read: ReadAt


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a response sits in the text a scorer reads: ``text``, the response's offset
    ``start`` in it, ``special`` (whether the tokenizer adds its special tokens; a chat template
    writes its own), and which part of the response ``text`` holds: from its ``lead``-th
    character, ``kept`` characters (a chat template may trim the response's whitespace)."""

    text: str
    start: int
    special: bool
    lead: int
    kept: int

    @property
    def prefix(self) -> str:
        """The text before the response (the same for every response of one prompt)."""
        return self.text[:self.start]

    def at(self, offset: int) -> int:
        """The offset in ``text`` of the response's character offset ``offset`` (clamped to
        the part ``text`` holds)."""
        return self.start + min(max(offset - self.lead, 0), self.kept)

    def step_ends(self, steps: Sequence[str]) -> list[int]:
        """The offsets in ``text`` where each of ``steps`` (the response, in order) ends."""
        ends, end = [], 0
        for step in steps:
            end += len(step)
            ends.append(self.at(end))
        return ends


def layout(tokenizer: Any, prompt: PromptLike, response: str, *, special: bool,
           open_turn: bool = False) -> Layout:
    """The text a reward model without a declared format reads for ``(prompt, response)``.

    A string prompt: ``prompt + response`` (``special`` tells whether the tokenizer adds its
    special tokens). Chat messages: ``apply_chat_template`` of the conversation with
    ``response`` as the assistant's turn (appended to a final assistant message), closed with
    the template's end of turn -- what a reward model trained on chat data reads -- or, with
    ``open_turn``, left open as a generator continues it (``continue_final_message``).

    Raises ``InvalidPromptError`` naming ``prompts`` when the tokenizer has no chat template,
    or when its template changes the response beyond trimming surrounding whitespace.
    """
    if isinstance(prompt, str):
        return Layout(prompt + response, len(prompt), special, 0, len(response))
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidPromptError(
            "prompts", "<chat messages>", "this scorer's tokenizer has no chat template; pass "
            "string prompts laid out the way its model was trained")
    text = _conversation(tokenizer, prompt, response, open_turn)
    marked = _conversation(tokenizer, prompt, _SENTINEL, open_turn)
    cut = marked.find(_SENTINEL)
    if cut >= 0 and text.startswith(marked[:cut]):
        lead = len(response) - len(response.lstrip())
        for skip, kept in ((0, response), (0, response.rstrip()), (lead, response.strip())):
            if text.startswith(kept, cut):
                return Layout(text, cut, False, skip, len(kept))
    raise InvalidPromptError(
        "prompts", "<chat messages>", "the scorer's chat template changes the response text, so "
        "its scores cannot be placed; pass string prompts laid out the way its model was trained")


def _conversation(tokenizer: Any, prompt: Sequence[Message], response: str,
                  open_turn: bool) -> str:
    messages = with_answer(prompt, response)
    if open_turn:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=False,
                                             continue_final_message=True)
    else:
        text = tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=False)
    return str(text)


def fill(template: str, prompt: str, response: str = "") -> str:
    """``template`` with ``{prompt}`` and ``{response}`` replaced in one pass (other braces, e.g.
    ``\\boxed{}``, stay as they are; braces inside the values are never reinterpreted)."""
    values = {"{prompt}": prompt, "{response}": response}
    return _PLACEHOLDER.sub(lambda m: values[m.group()], template)


def chat_text(tokenizer: Any, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    """The tokenizer's chat template applied to ``messages`` as text; raises
    :class:`ModelLoadError` when the tokenizer has none."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelLoadError("this reward model's tokenizer has no chat_template: give chat=False "
                             "in its PRMFormat with string prompts, or a tokenizer with one")
    text = tokenizer.apply_chat_template(messages, tokenize=False,
                                         add_generation_prompt=generation_prompt)
    if not isinstance(text, str):
        raise ModelLoadError(f"apply_chat_template returned {type(text).__name__}, not text")
    return text


def _split_prompt(fmt: PRMFormat, prompt: PromptLike) -> tuple[list[dict[str, str]], str, bool]:
    """(earlier chat turns incl. the system prompt, the last user text, chat mode)."""
    if isinstance(prompt, str):
        history: list[dict[str, str]] = []
        text, chat = prompt, fmt.is_chat
    else:
        messages = [dict(m) for m in prompt]
        if not messages or messages[-1].get("role") != "user" \
                or not isinstance(messages[-1].get("content"), str):
            raise InvalidPromptError("prompts", prompt, "a chat prompt must end with a user "
                                     "message with text content")
        history, text, chat = messages[:-1], messages[-1]["content"], True
    if chat and fmt.system_prompt is not None \
            and not any(m.get("role") == "system" for m in history):
        history = [{"role": "system", "content": fmt.system_prompt}] + history
    return history, text, chat


def render_steps(fmt: PRMFormat, tokenizer: Any, prompt: PromptLike,
                 steps: Sequence[str]) -> Rendered:
    """The input of a step-tag, chat-turns or separator PRM for one partial solution."""
    history, user, chat = _split_prompt(fmt, prompt)
    head = fill(fmt.template, user)
    stripped = [s.strip() for s in steps]
    if fmt.kind == "chat-turns":
        return _render_turns(fmt, tokenizer, history, head, stripped)
    start = chat_text(tokenizer, history + [{"role": "user", "content": head}], True) \
        if chat else head
    tag = " " + fmt.step_tag if fmt.kind == "step-tag" else fmt.separator
    text, ends = start, []
    for k, step in enumerate(stripped):
        text += (fmt.step_join if k else "") + step + tag
        ends.append(len(text))
    return Rendered(text, ends, start, chat, "at")


def _render_turns(fmt: PRMFormat, tokenizer: Any, history: list[dict[str, str]], head: str,
                  steps: list[str]) -> Rendered:
    conv = list(history)
    prefixes = []
    for k, step in enumerate(steps):
        conv.append({"role": "user", "content": head + step if k == 0 else step})
        prefixes.append(chat_text(tokenizer, conv, True))
        conv.append({"role": "assistant", "content": fmt.good_token})
    text = chat_text(tokenizer, conv, False)
    if not all(text.startswith(p) for p in prefixes):
        raise ModelLoadError("this tokenizer's chat template renders a conversation differently "
                             "from its own prefixes (not prefix-stable); chat-turns needs one "
                             "that is")
    first = text.rfind(head + steps[0], 0, len(prefixes[0]))
    prefix = text[:first + len(head)] if first >= 0 else ""
    return Rendered(text, [len(p) for p in prefixes], prefix, True, "before")


def render_response(fmt: PRMFormat, tokenizer: Any, prompt: PromptLike,
                    response: str) -> Rendered:
    """The input of a generative verifier: ``template(prompt, response)``, in a user turn
    followed by the generation prompt in chat mode; the score is read at the last token."""
    history, user, chat = _split_prompt(fmt, prompt)

    def build(resp: str) -> str:
        filled = fill(fmt.template, user, resp)
        return chat_text(tokenizer, history + [{"role": "user", "content": filled}], True) \
            if chat else filled

    text = build(response)
    marked = build(_SENTINEL)
    cut = marked.find(_SENTINEL)
    prefix = marked[:cut] if cut >= 0 and text.startswith(marked[:cut]) else ""
    return Rendered(text, [len(text)], prefix, chat, "at")


def tokenize_rendered(tokenizer: Any, row: Rendered) -> tuple[list[int], list[int]]:
    """(token ids, score token indices) of a rendered row under the reward model's own fast
    tokenizer: special tokens are added unless the chat template already wrote them."""
    enc = tokenizer(row.text, add_special_tokens=not row.chat, return_offsets_mapping=True)
    return list(enc["input_ids"]), token_positions(enc["offset_mapping"], row.ends, row.read)


def token_positions(offsets: Sequence[tuple[int, int]], ends: Sequence[int],
                    read: ReadAt) -> list[int]:
    """Token indices of the score offsets ``ends`` (see the module docstring for ``read``).

    ``offsets`` are the tokenizer's character spans in order; zero-width tokens (BOS) never
    start a span.
    """
    index = [i for i, (s, e) in enumerate(offsets) if e > s]
    starts = [offsets[i][0] for i in index]  # non-decreasing
    out = []
    for end in ends:
        j = bisect.bisect_left(starts, end)  # first spanning token starting at or after end
        if read == "at":
            if j == 0:
                raise InvalidPromptError("steps", end, "no token before the score position")
            out.append(index[j - 1])
        else:
            if j == len(starts) or starts[j] != end or index[j] == 0:
                raise InvalidPromptError(
                    "steps", end, "the reply token merges with the text before it, so no "
                    "position predicts it (check good_token against the chat template)")
            out.append(index[j] - 1)
    return out
