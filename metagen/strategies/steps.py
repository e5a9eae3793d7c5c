"""What a reasoning *step* is, for step-level search.

A step ends at a stop string (default: a newline) or where a user callable says it ends. Search
asks the backend for one step at a time with ``stop=step.stop``; backends exclude the stop string
from the completion text, so :meth:`StepDefinition.close` puts it back, and the next generate
prompt is the prompt extended by the steps so far (``prompt + steps`` for text; for chat
messages the assistant's partial answer, continued through the chat template), which a prefix
cache (the engine's radix cache, or a server's) turns into a short prefill.

A step *ends the solution* (makes a terminal node) when the completion ended for any reason other
than a step stop (EOS, a stop token id, one of the caller's own stop strings, ``max_tokens``), or
when it contains ``final_marker`` (GSM8K's ``####``), or when ``is_final(step)`` says so. Treating
a step that ran out of ``max_step_tokens`` as final follows search-and-learn (Beeching et al. 2024).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from metagen.errors import InvalidParameterError
from metagen.types import Completion, SamplingParams

Boundary = Callable[[str], "int | None"]


@dataclass(slots=True, frozen=True)
class StepDefinition:
    """Where steps end.

    - ``stop``: stop strings that end a step (included in the step text).
    - ``boundary``: optional ``f(text) -> index | None``; when given, the first step of a
      completion is ``text[:index]`` (the rest is discarded, its tokens still count as generated)
      and ``None`` means the completion holds no complete step (it then ends the solution).
    - ``max_step_tokens``: token cap of one step.
    - ``final_marker``: a step containing it ends the solution (``None`` disables).
    - ``is_final``: optional predicate on the step text that ends the solution.
    """

    stop: tuple[str, ...] = ("\n",)
    boundary: Boundary | None = None
    max_step_tokens: int = 64
    final_marker: str | None = "####"
    is_final: Callable[[str], bool] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        if not isinstance(self.stop, tuple) or not all(isinstance(s, str) and s for s in self.stop):
            raise InvalidParameterError("stop", self.stop, "must be a tuple of non-empty strings")
        if not self.stop and self.boundary is None:
            raise InvalidParameterError("stop", self.stop,
                                        "give at least one stop string or a boundary callable")
        if self.boundary is not None and not callable(self.boundary):
            raise InvalidParameterError("boundary", self.boundary, "must be callable")
        if self.is_final is not None and not callable(self.is_final):
            raise InvalidParameterError("is_final", self.is_final, "must be callable")
        if isinstance(self.max_step_tokens, bool) or not isinstance(self.max_step_tokens, int) \
                or self.max_step_tokens < 1:
            raise InvalidParameterError("max_step_tokens", self.max_step_tokens,
                                        "must be a positive integer")
        if self.final_marker is not None and (not isinstance(self.final_marker, str)
                                              or not self.final_marker):
            raise InvalidParameterError("final_marker", self.final_marker,
                                        "must be a non-empty string or None")

    def params(self, base: SamplingParams, n: int, max_tokens: int | None = None
               ) -> SamplingParams:
        """Sampling params for one step: ``base`` with ``n``, the step stops and the step cap.

        The caller's own ``base.stop`` strings are kept (they end the whole solution).
        """
        cap = self.max_step_tokens if max_tokens is None else min(max_tokens, self.max_step_tokens)
        stops = tuple(dict.fromkeys(base.stop + self.stop))
        return base.with_(n=n, stop=stops, max_tokens=cap)

    def close(self, completion: Completion) -> tuple[str, bool]:
        """The step text of a one-step completion and whether it ends the solution."""
        text = completion.text
        if self.boundary is not None:
            cut = self.boundary(text)
            if cut is not None:
                if not 0 < cut <= len(text):
                    raise InvalidParameterError("boundary", cut,
                                                f"must be in [1, {len(text)}] for {text[:40]!r}")
                step = text[:cut]
                return step, self.final(step)
        if (completion.finish_reason == "stop" and isinstance(completion.stop_reason, str)
                and completion.stop_reason in self.stop):
            step = text + completion.stop_reason
            return step, self.final(step)
        return text, True

    def final(self, step: str) -> bool:
        """True when ``step`` by its content ends the solution."""
        if self.final_marker is not None and self.final_marker in step:
            return True
        return bool(self.is_final(step)) if self.is_final is not None else False

    def split(self, text: str) -> list[str]:
        """Cut a whole solution into steps (each keeps its stop string); '' gives []."""
        out: list[str] = []
        rest = text
        while rest:
            cut = self._first_end(rest)
            if cut is None:
                out.append(rest)
                break
            out.append(rest[:cut])
            rest = rest[cut:]
        return out

    def _first_end(self, text: str) -> int | None:
        if self.boundary is not None:
            cut = self.boundary(text)
            if cut is not None:
                return cut
        ends = [text.find(s) + len(s) for s in self.stop if s in text]
        return min(ends) if ends else None


DEFAULT_STEPS = StepDefinition()
