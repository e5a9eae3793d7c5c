"""A process reward model used as an outcome reward (best-of-N with a PRM).

Each completion is split into lines (:func:`~metagen.scorers.hf_reward.split_steps`, the PRM's
own step definition), all chains are scored in ONE ``score_steps`` call and each chain's step
scores are aggregated (:func:`~metagen.scorers.base.aggregate_steps`, default ``min``: Lightman
et al. 2023's aggregation; Snell et al. 2024 compare PRM beam search against this baseline).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.generators.base import Prompt
from metagen.scorers.base import StepAggregation, aggregate_steps
from metagen.scorers.callables import check_scores
from metagen.scorers.hf_reward import split_steps
from metagen.scorers.usage import usage_of
from metagen.types import Usage


class PRMOutcome:
    """``score(prompts, completions)``: the PRM's step scores of each completion, aggregated
    with ``aggregation``. An empty completion is one empty step (the PRM's value of the bare
    prompt). ``usage`` is the wrapped PRM's. Raises ``InvalidParameterError`` for an unknown
    aggregation and ``ValueError`` when the PRM returns a wrong number of step lists."""

    def __init__(self, prm: Any, aggregation: StepAggregation = "min") -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        self.prm, self.aggregation = prm, aggregation

    @property
    def usage(self) -> Usage:
        return usage_of(self.prm)

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        chains = [split_steps(c) or [c] for c in completions]
        per_step = self.prm.score_steps(list(prompts), chains)
        if len(per_step) != len(chains):
            raise ValueError(f"PRM returned {len(per_step)} step lists for {len(chains)} inputs")
        return [aggregate_steps(check_scores(s, len(c), who="PRM"), self.aggregation)
                for s, c in zip(per_step, chains)]
