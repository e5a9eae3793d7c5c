"""Shared helpers for the parallel-strategy tests (scripted generators come from MockGenerator)."""

from __future__ import annotations

from metagen.scorers.usage import UsageMeter
from metagen.types import Completion, SamplingParams

PARAMS = SamplingParams(temperature=1.0, max_tokens=8)


class TableReward:
    """Scripted reward: a score per completion text; counts calls and meters usage."""

    def __init__(self, table: dict[str, float], default: float = 0.0) -> None:
        self.table, self.default, self.calls = table, default, []
        self._meter = UsageMeter()

    @property
    def usage(self):
        return self._meter.usage

    def score(self, prompts, completions):
        self.calls.append((list(prompts), list(completions)))
        self._meter.add(sum(len(c.split()) for c in completions), 10.0)
        return [self.table.get(c, self.default) for c in completions]


def comp(text: str, logprob: float | None = None, tokens: int = 1) -> Completion:
    """A scripted completion with token ids and an optional cumulative log-probability."""
    return Completion(text=text, token_ids=tuple(range(tokens)), cumulative_logprob=logprob,
                      finish_reason="stop")
