"""A process reward model used as an outcome reward (best-of-N with a PRM).

Each completion is split into lines (:func:`~metagen.scorers.hf_reward.split_steps`, the PRM's
own step definition and the step searches' default, :data:`~metagen.strategies.steps.
DEFAULT_STEPS`), all chains are scored in ONE ``score_steps`` call and each chain's step scores
are aggregated (:func:`~metagen.scorers.base.aggregate_steps`, default ``min``: Lightman et al.
2023's aggregation; Snell et al. 2024 compare PRM beam search against this baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Prompt
from metagen.scorers.base import StepAggregation, aggregate_steps
from metagen.scorers.callables import check_scores
from metagen.scorers.hf_reward import split_steps
from metagen.scorers.usage import usage_of
from metagen.types import Usage


class PRMOutcome:
    """``score(prompts, completions)``: the PRM's step scores of each completion, aggregated
    with ``aggregation``. ``prm`` has ``score_steps(prompts, steps)`` (one batched call), or is
    a callable ``f(prompt, steps) -> scores | float`` called once per completion, whose single
    number is the value of the whole path (the last step's score, as the step searches read
    it). An empty completion is one empty step (the PRM's value of the bare prompt). ``usage``
    is the wrapped PRM's. Raises ``InvalidParameterError`` for an unknown aggregation or a
    ``prm`` that is neither, and ``ValueError`` when the PRM returns a wrong number of step
    lists."""

    def __init__(self, prm: Any, aggregation: StepAggregation = "min") -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        if not hasattr(prm, "score_steps") and not callable(prm):
            raise InvalidParameterError("prm", prm, "must have score_steps(prompts, steps) or "
                                        "be callable")
        self.prm, self.aggregation = prm, aggregation

    @property
    def usage(self) -> Usage:
        return usage_of(self.prm)

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        chains = [split_steps(c) or [c] for c in completions]
        if hasattr(self.prm, "score_steps"):
            per_step = self.prm.score_steps(list(prompts), chains)
            if len(per_step) != len(chains):
                raise ValueError(f"PRM returned {len(per_step)} step lists for {len(chains)} "
                                 "inputs")
            return [aggregate_steps(check_scores(s, len(c), who="PRM"), self.aggregation)
                    for s, c in zip(per_step, chains)]
        out = []
        for prompt, chain in zip(prompts, chains):
            value = self.prm(prompt, chain)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(float(check_scores([value], 1, who="PRM")[0]))
            else:
                out.append(aggregate_steps(check_scores(list(value), len(chain), who="PRM"),
                                           self.aggregation))
        return out
