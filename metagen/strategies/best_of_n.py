"""Best-of-N: sample N, return the candidate with the highest reward (Welleck et al. 2024, 4.1;
Cobbe et al. 2021 verifier reranking). Ties: the lowest sample index wins.

``best_of_n_prm`` ranks the samples by a process reward model instead, each sample's step
scores aggregated into one value (:class:`~metagen.scorers.prm_outcome.PRMOutcome`, min over
steps by default): the baseline a PRM-guided step search is compared with at equal samples
(Snell et al. 2024)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import ProcessRewardLike, RewardLike, StepAggregation
from metagen.scorers.callables import as_reward, check_scores
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import run_parallel
from metagen.strategies.selection import Selection, argmax_first, flatten, scorers_usage
from metagen.strategies.spec import StrategySpec, param
from metagen.types import Completion, Result, SamplingParams, Usage


class BestOfN:
    """Selector: argmax of ``reward`` (a RewardModel or ``fn(prompt, completion) -> float``).
    All candidates of all groups are scored in ONE reward call."""

    name = "best_of_n"

    def __init__(self, reward: RewardLike) -> None:
        self.reward = as_reward(reward)

    @property
    def usage(self) -> Usage:
        return scorers_usage(self.reward)

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]:
        flat_p, flat_c, starts = flatten(prompts, groups)
        scores = check_scores(self.reward.score(flat_p, flat_c), len(flat_c),
                              who=type(self.reward).__name__)
        out = []
        for start, group in zip(starts, groups):
            mine = scores[start:start + len(group)]
            out.append(Selection(argmax_first(mine), list(mine), {"rewards": list(mine)}))
        return out


def best_of_n(generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16,
              reward: RewardLike,
              params: SamplingParams | None = None, budget: Budget | None = None,
              min_successful: int = 1) -> Result | list[Result]:
    """The highest-reward of ``n`` samples (one generate call, one reward call).

    A list of prompts returns a list of Results. ``Result.scores`` are the rewards of the
    successful candidates; ``trace["rewards"]`` repeats them. Raises ``InsufficientSamples``
    below ``min_successful`` successes, and whatever the reward model raises (a failed scorer
    call is never a score).
    """
    return run_parallel(generator, prompt, BestOfN(reward), n=n, params=params, budget=budget,
                        min_successful=min_successful)


def best_of_n_prm(generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16,
                  prm: ProcessRewardLike, aggregation: StepAggregation = "min",
                  params: SamplingParams | None = None, budget: Budget | None = None,
                  min_successful: int = 1) -> Result | list[Result]:
    """Best-of-N ranked by a process reward: each of ``n`` samples is cut into lines (the step
    searches' default steps), ``prm`` scores every step (one ``score_steps`` call for all
    samples) and ``aggregation`` (``min``, ``last``, ``prod``, ``mean``) makes a sample's value;
    the highest wins (:func:`best_of_n` with :class:`~metagen.scorers.prm_outcome.PRMOutcome`
    as the reward). ``prm`` is a ProcessRewardModel or ``f(prompt, steps) -> scores | float``.
    """
    from metagen.scorers.prm_outcome import PRMOutcome

    return best_of_n(generator, prompt, n=n, reward=PRMOutcome(prm, aggregation), params=params,
                     budget=budget, min_successful=min_successful)


@dataclass(frozen=True, slots=True)
class BestOfNConfig:
    """best_of_n's parameters besides N."""

    min_successful: int = param(1, "fewest successful samples to choose from", lo=1)


def _best_of_n(reward: Any, key: AnswerKey | None, options: Mapping[str, Any]) -> BestOfN:
    return BestOfN(reward)


SPECS = [
    StrategySpec("best_of_n", best_of_n, "subsampled", "best-of-N (ORM)", BestOfNConfig,
                 needs=frozenset({"reward"}), scorer_args={"reward": "reward"},
                 selector_factory=_best_of_n),
    StrategySpec("best_of_n_confidence", best_of_n, "subsampled", "best-of-N (confidence)",
                 BestOfNConfig, needs=frozenset({"confidence"}),
                 scorer_args={"confidence": "reward"}, selector_factory=_best_of_n,
                 not_on={"serve": "best_of_n with the policy's verifier loaded as an ORM",
                         "openai": "the confidence verifier reads a local model's logits"}),
    StrategySpec("best_of_n_prm", best_of_n_prm, "subsampled", "best-of-N (PRM, min over steps)",
                 BestOfNConfig, needs=frozenset({"prm"}), scorer_args={"prm": "prm"},
                 selector_factory=_best_of_n),
]
