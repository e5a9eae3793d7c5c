"""Scripted (mock) generator and step scorer for step-search tests.

The generator asks ``script(prefix, sample_index)`` for the whole continuation of a prompt and
then behaves like a real backend: it cuts at the first stop string (excluded from the text,
``finish_reason="stop"``, ``stop_reason`` = the string), at ``max_tokens`` (``"length"``), or
ends at the end of the script text (EOS: ``"stop"`` with ``stop_reason=None``). One token = one
character (the stop string's characters count as generated tokens, as on a real backend, where
the stop tokens are sampled). ``None`` from the script is a failed sample (``"error"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metagen.generators.base import Capabilities
from metagen.types import Completion, SamplingParams, Usage

Script = Callable[[str, int], "str | None"]


class ScriptedStepGenerator:
    """Scripted generator; records every call's prompts and params."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.calls: list[tuple[list[str], SamplingParams]] = []
        self._usage = Usage()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(prefix_cache=True)

    @property
    def usage(self) -> Usage:
        return self._usage

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((list(prompts), params))
        out, generated = [], 0
        for prompt in prompts:
            row = []
            for i in range(params.n):
                c = self._one(self.script(prompt, i), params)
                generated += len(c.token_ids)
                row.append(c)
            out.append(row)
        self._usage = self._usage + Usage(
            prompt_tokens=sum(len(p) for p in prompts) * params.n,
            generated_tokens=generated, calls=1)
        return out

    @staticmethod
    def _one(text: str | None, params: SamplingParams) -> Completion:
        if text is None:
            return Completion(text="", finish_reason="error")
        hits = [(text.find(s), s) for s in params.stop if s in text]
        if hits:
            at, stop = min(hits)
            body, tokens, finish, reason = text[:at], at + len(stop), "stop", stop
        else:
            body, tokens, finish, reason = text, len(text), "stop", None
        if tokens > params.max_tokens:
            body, tokens, finish, reason = text[:params.max_tokens], params.max_tokens, \
                "length", None
        return Completion(text=body, token_ids=tuple(range(tokens)),
                          cumulative_logprob=-float(tokens), finish_reason=finish,
                          stop_reason=reason)


class ScriptedPRM:
    """Scripted process reward model: a step's score is ``table[name]`` (``name`` = the step's
    first word), or ``table(prompt, name)`` when ``table`` is callable."""

    def __init__(self, table: dict[str, float] | Callable[[str, str], float],
                 default: float = 0.0) -> None:
        self.table = table
        self.default = default
        self.calls: list[list[list[str]]] = []
        self._usage = Usage()

    @property
    def usage(self) -> Usage:
        return self._usage

    def score_steps(self, prompts: Sequence[str], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        self.calls.append([list(s) for s in steps])
        self._usage = self._usage + Usage(scorer_calls=1,
                                          scorer_tokens=sum(len(x) for s in steps for x in s))
        return [[self._one(p, x) for x in s] for p, s in zip(prompts, steps)]

    def _one(self, prompt: str, step: str) -> float:
        name = step.split()[0] if step.split() else ""
        if callable(self.table):
            return self.table(prompt, name)
        return self.table.get(name, self.default)


def tree_script(prompt_end: str, depth: int, final: str = " #### ") -> Script:
    """Names steps by their path: from step ``"01"`` sample ``i`` gives ``"01i"``.

    Steps end with a newline (followed by junk the stop string cuts off); a step at ``depth``
    ends the solution: ``"<name> #### <name>"`` then EOS.
    """
    def script(prefix: str, i: int) -> str:
        body = prefix.split(prompt_end, 1)[1]
        lines = [x for x in body.split("\n") if x]
        name = (lines[-1] if lines else "") + str(i)
        if len(name) >= depth:
            return f"{name}{final}{name}"
        return f"{name}\njunk"
    return script
