"""How a reward model reads its input and where it reports a score: :class:`PRMFormat` and presets.

A causal LM or a token classifier trained as a process reward model expects one exact input
layout; nothing in its weights says which, so the layout is declared by the user or taken from
:data:`PRM_PRESETS` by name (never guessed). Kinds:

- ``"step-tag"`` -- Math-Shepherd (Wang et al. 2024, "Math-Shepherd: Verify and Reinforce LLMs
  Step-by-step without Human Annotations"; ``peiyi9979/math-shepherd-mistral-7b-prm``): a causal
  LM reads ``template(prompt) + step_join.join(step + " " + step_tag)``; the score of a step is
  ``p(good) / (p(good) + p(bad))`` from the next-token logits AT its tag token.
- ``"chat-turns"`` -- RLHFlow (``RLHFlow/Llama3.1-8B-PRM-Mistral-Data`` and ``-Deepseek-Data``;
  Xiong et al. 2024, "An Implementation of Generative PRM"): a chat where the first user turn is
  ``template(prompt) + step_1``, every later step is a user turn and every assistant turn is
  ``good_token``; the score of step k is ``p(good)`` over ``{good, bad}`` at the position that
  predicts the k-th assistant reply.
- ``"separator"`` -- Qwen2.5-Math-PRM (Zhang et al. 2025, "The Lessons of Developing Process
  Reward Models in Mathematical Reasoning"; ``Qwen/Qwen2.5-Math-PRM-7B``): a two-label token
  classifier reads the chat ``[system, user: prompt, assistant: step + separator + ...]``; the
  score is ``softmax(head)[1]`` at each separator token.
- ``"generative"`` -- a generative verifier (GenRM; Zhang et al. 2024, "Generative Verifiers:
  Reward Modeling as Next-Token Prediction"): a causal LM reads ``template(prompt, response)``
  (a verification question) and the score is ``p(good) / (p(good) + p(bad))`` (e.g. Yes / No) at
  the answer position, the last token.

Steps are stripped of surrounding whitespace when they are laid out (step-tag, chat-turns,
separator); a generative verifier reads the response verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from metagen.errors import InvalidParameterError

PRMKind = Literal["step-tag", "chat-turns", "separator", "generative"]
KINDS: tuple[PRMKind, ...] = ("step-tag", "chat-turns", "separator", "generative")


@dataclass(frozen=True, slots=True)
class PRMFormat:
    """The input layout of a reward model (see the module docstring for each ``kind``).

    - ``template``: the text before the steps, with ``{prompt}`` (and, for ``"generative"`` only,
      ``{response}``, required there). In chat mode it is the content of the last user turn.
    - ``step_tag``: the tag after each step (``"step-tag"``), preceded by one space.
    - ``separator``: the text after each step (``"separator"``), e.g. ``"<extra_0>"``.
    - ``good_token`` / ``bad_token``: compared at a scored position (the three causal-LM
      kinds); each is the text's own single token under the model's tokenizer, as the official
      recipes encode it (a lone leading ``"▁"`` piece dropped, so ``"+"`` is Mistral's ``"▁+"``).
    - ``step_join``: text between laid-out steps (``"step-tag"``, ``"separator"``).
    - ``step_delimiter``: how ``score(prompts, completions)`` splits a completion into steps.
    - ``chat``: render string prompts through the tokenizer's chat template as a user turn
      (chat-message prompts always are); ``"chat-turns"`` is always chat.
    - ``system_prompt``: a system turn put first in chat mode, unless the prompt has one.
    """

    kind: PRMKind
    template: str = "{prompt}"
    step_tag: str = "ки"
    separator: str = "<extra_0>"
    good_token: str = "+"
    bad_token: str = "-"
    step_join: str = "\n"
    step_delimiter: str = "\n"
    chat: bool = False
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidParameterError("kind", self.kind, f"must be one of {', '.join(KINDS)}")
        if "{prompt}" not in self.template:
            raise InvalidParameterError("template", self.template, "must contain {prompt}")
        if self.kind == "generative" and "{response}" not in self.template:
            raise InvalidParameterError("template", self.template,
                                        "a generative verifier's template must contain {response}")
        if self.kind != "generative" and "{response}" in self.template:
            raise InvalidParameterError("template", self.template,
                                        "only kind='generative' takes {response}")
        for name in ("good_token", "bad_token", "step_delimiter"):
            if not getattr(self, name):
                raise InvalidParameterError(name, getattr(self, name), "must not be empty")
        if self.good_token == self.bad_token:
            raise InvalidParameterError("bad_token", self.bad_token, "must differ from good_token")
        if self.kind == "step-tag" and not self.step_tag:
            raise InvalidParameterError("step_tag", self.step_tag, "must not be empty")
        if self.kind == "separator" and not self.separator:
            raise InvalidParameterError("separator", self.separator, "must not be empty")

    @property
    def is_chat(self) -> bool:
        """Whether string prompts go through the chat template."""
        return self.chat or self.kind == "chat-turns"


PRM_PRESETS: dict[str, PRMFormat] = {
    # Math-Shepherd: f"{question} {output}" with steps "Step k: ... ки" joined by "\n".
    "math-shepherd": PRMFormat(kind="step-tag", template="{prompt} ", step_tag="ки",
                               good_token="+", bad_token="-", step_join="\n",
                               step_delimiter="\n"),
    # RLHFlow: user "question step_1", assistant "+", user "step_2", assistant "+", ...
    "rlhflow-llama3.1-8b-prm": PRMFormat(kind="chat-turns", template="{prompt} ",
                                         good_token="+", bad_token="-", step_delimiter="\n\n",
                                         chat=True),
    # Qwen2.5-Math-PRM: system + user query + assistant "step<extra_0>step<extra_0>".
    "qwen2.5-math-prm": PRMFormat(
        kind="separator", separator="<extra_0>", step_join="", step_delimiter="\n\n", chat=True,
        system_prompt="Please reason step by step, and put your final answer within \\boxed{}."),
}
"""Known reward models' layouts, keyed by the name a user passes as ``format=``."""


def resolve_format(format: str | PRMFormat) -> PRMFormat:
    """A :class:`PRMFormat` as is, or the preset of that name; raises ``InvalidParameterError``
    naming ``format`` for an unknown name or another type."""
    if isinstance(format, PRMFormat):
        return format
    if isinstance(format, str):
        preset = PRM_PRESETS.get(format)
        if preset is None:
            raise InvalidParameterError("format", format, "unknown preset; known: "
                                        f"{', '.join(sorted(PRM_PRESETS))}, or pass a PRMFormat")
        return preset
    raise InvalidParameterError("format", format, "must be a preset name or a PRMFormat")
