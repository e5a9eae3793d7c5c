"""A scripted generator for strategy tests: no model, exact control over every sample.

:class:`MockGenerator` implements the :class:`~metagen.generators.base.Generator` protocol (and
``score`` when given a scorer). Its outputs come from a *script*:

- a callable ``script(prompt, sample_index) -> str | Completion`` (pure: the same prompt and sample
  index always give the same sample, like a seeded backend);
- a mapping ``prompt -> [outputs]``: each prompt has a cursor; a call asking for ``n`` samples takes
  the next ``n`` outputs (wrapping around), so successive calls walk through the list;
- a plain sequence ``[outputs]``: the same list for every prompt (one cursor per prompt).

String outputs are treated like a model's text ending in EOS, then ``SamplingParams`` are applied to
them the way a real backend would: tokens are whitespace-separated words (ids from a vocabulary
the mock builds as it goes), ``max_tokens`` truncates to that many words (finish ``"length"``), the
earliest ``stop`` string ends the text before the stop (finish ``"stop"``, ``stop_reason`` = the
string, which is not included). A scripted :class:`~metagen.types.Completion` is returned as is.
Chat prompts are rendered as ``"role: content"`` lines joined by newlines (the script sees that).

Faults: ``fault(prompt, sample_index, call_index)`` returns ``None`` for a
good sample, a reason string for a failed sample -- returned in place as
``Completion(text="", finish_reason="error", stop_reason=reason)`` -- or an exception instance,
which ``generate`` raises (the whole call fails, e.g. a transport error). Calls that raise are
still recorded in :attr:`calls` but add no usage.

Usage: ``prompt_tokens`` counts the prompt's words once per sample (no prefix cache),
``generated_tokens`` the returned tokens, ``generator_flops`` = ``flops_per_token`` x both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Union

from metagen.errors import CapabilityError, InvalidParameterError, InvalidPromptError
from metagen.generators.base import Capabilities, Prompt, check_prompts
from metagen.types import Completion, FinishReason, SamplingParams, Usage

Output = Union[str, Completion]
Script = Union[Callable[[str, int], Output], Mapping[str, Sequence[Output]], Sequence[Output]]
Fault = Callable[[str, int, int], Union[str, BaseException, None]]


@dataclass(slots=True)
class MockCall:
    """One recorded ``generate`` or ``score`` call: the rendered prompts and what was asked."""

    kind: str  # "generate" | "score"
    prompts: list[str]
    params: SamplingParams | None = None
    continuations: list[list[str]] | None = None


@dataclass(slots=True)
class _Cursor:
    positions: dict[str, int] = field(default_factory=dict)

    def take(self, prompt: str, outputs: Sequence[Output], n: int) -> list[Output]:
        start = self.positions.get(prompt, 0)
        self.positions[prompt] = start + n
        return [outputs[(start + j) % len(outputs)] for j in range(n)]


def render_chat_plain(prompt: Prompt) -> str:
    """The mock's rendering of a prompt: a string as is, messages as ``role: content`` lines."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def apply_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """Cut ``text`` before the earliest occurrence of any stop string; return (text, stop hit).

    When two stop strings start at the same position the longer one is reported.
    """
    best: tuple[int, int, str] | None = None
    for s in stop:
        pos = text.find(s)
        if pos >= 0 and (best is None or (pos, -len(s)) < (best[0], best[1])):
            best = (pos, -len(s), s)
    if best is None:
        return text, None
    return text[:best[0]], best[2]


class MockGenerator:
    """Scripted generator. See the module docstring for the script, fault and usage contracts.

    ``calls`` records every call (``kind``, rendered prompts, params); ``num_calls`` counts
    ``generate`` calls only. ``scorer(prompt, continuation) -> float`` enables ``score``.
    """

    def __init__(self, script: Script, *, capabilities: Capabilities | None = None,
                 fault: Fault | None = None, scorer: Callable[[str, str], float] | None = None,
                 flops_per_token: float = 1.0) -> None:
        if not (callable(script) or isinstance(script, (Mapping, Sequence))) \
                or isinstance(script, str):
            raise InvalidParameterError("script", script,
                                        "must be a callable, a mapping prompt -> outputs, "
                                        "or a list of outputs")
        if isinstance(script, Sequence) and not callable(script) and not script:
            raise InvalidParameterError("script", script, "must not be empty")
        self._script = script
        self._fault = fault
        self._scorer = scorer
        self._flops_per_token = float(flops_per_token)
        self._capabilities = capabilities or Capabilities(prompt_scoring=scorer is not None)
        self._cursor = _Cursor()
        self._vocab: dict[str, int] = {}
        self._usage = Usage()
        self.calls: list[MockCall] = []

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def usage(self) -> Usage:
        """Cumulative usage over every successful call."""
        return self._usage

    @property
    def num_calls(self) -> int:
        """Number of ``generate`` calls made (including ones that raised a scripted fault)."""
        return sum(1 for c in self.calls if c.kind == "generate")

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` scripted completions, in one call."""
        start = time.perf_counter()
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        texts = [render_chat_plain(p) for p in check_prompts(prompts)]
        call_index = self.num_calls
        self.calls.append(MockCall("generate", texts, params))
        out: list[list[Completion]] = []
        prompt_tokens = generated = 0
        for text in texts:
            row: list[Completion] = []
            for j, raw in enumerate(self._outputs(text, params.n)):
                failure = self._fault(text, j, call_index) if self._fault else None
                if isinstance(failure, BaseException):
                    raise failure
                if failure is not None:
                    comp = Completion(text="", finish_reason="error", stop_reason=str(failure))
                else:
                    comp = self._complete(raw, params)
                row.append(comp)
                prompt_tokens += len(text.split())
                generated += len(comp.token_ids)
            out.append(row)
        self._usage = self._usage + Usage(
            prompt_tokens=prompt_tokens, generated_tokens=generated, calls=1,
            generator_flops=self._flops_per_token * (prompt_tokens + generated),
            wall_time=time.perf_counter() - start)
        return out

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        """``out[i][j] = scorer(prompts[i], continuations[i][j])``; needs a ``scorer``."""
        if self._scorer is None:
            raise CapabilityError("MockGenerator was built without a scorer; pass scorer=...")
        texts = [render_chat_plain(p) for p in check_prompts(prompts)]
        if len(continuations) != len(texts):
            raise InvalidParameterError("continuations", f"<{len(continuations)} lists>",
                                        f"need one list per prompt ({len(texts)})")
        conts = [list(c) for c in continuations]
        self.calls.append(MockCall("score", texts, continuations=conts))
        out = [[float(self._scorer(p, c)) for c in cs] for p, cs in zip(texts, conts)]
        tokens = sum(len(p.split()) + len(c.split()) for p, cs in zip(texts, conts) for c in cs)
        self._usage = self._usage + Usage(scorer_tokens=tokens, scorer_calls=1,
                                          scorer_flops=self._flops_per_token * tokens)
        return out

    def _outputs(self, prompt: str, n: int) -> list[Output]:
        script = self._script
        if callable(script):
            return [script(prompt, j) for j in range(n)]
        if isinstance(script, Mapping):
            if prompt not in script:
                raise InvalidPromptError("prompt", prompt, "is not in the mock's script")
            return self._cursor.take(prompt, script[prompt], n)
        return self._cursor.take(prompt, script, n)

    def _complete(self, raw: Output, params: SamplingParams) -> Completion:
        if isinstance(raw, Completion):
            return raw
        if not isinstance(raw, str):
            raise InvalidParameterError("script", raw, "outputs must be str or Completion")
        text, hit = apply_stop(raw, params.stop)
        finish: FinishReason = "stop"
        words = text.split()
        if len(words) > params.max_tokens:
            words, hit, finish = words[:params.max_tokens], None, "length"
            text = _first_words(text, params.max_tokens)
        ids = tuple(self._vocab.setdefault(w, len(self._vocab)) for w in words)
        return Completion(text=text, token_ids=ids, finish_reason=finish, stop_reason=hit)


def _first_words(text: str, k: int) -> str:
    """The prefix of ``text`` that holds its first ``k`` whitespace-separated words."""
    count, i, n = 0, 0, len(text)
    while i < n:
        while i < n and text[i].isspace():
            i += 1
        if i == n:
            break
        if count == k:
            return text[:i].rstrip()
        while i < n and not text[i].isspace():
            i += 1
        count += 1
    return text
