"""Voting over extracted answers.

- :func:`self_consistency` — majority vote (Wang et al. 2023, "Self-Consistency Improves Chain
  of Thought Reasoning").
- :func:`weighted_vote` — each vote weighted by a reward (Li et al. 2023, DiVeRSe; Uesato et al.
  2022, ORM-weighted majority voting) or by the sample's length-normalised probability (Wang et
  al. 2023, Table 1); ``aggregate="sum"`` adds the weights of an answer, ``"mean"`` averages them.

Answers come from ``extract(text)`` (default :func:`metagen.answers.numeric.extract_answer`) and are
grouped with ``match`` (default ``answers_match``). A sample without an answer abstains. A task's
``answer_key`` (:class:`~metagen.answers.key.AnswerKey`, e.g. MATH-500's) replaces both
(passing it with ``extract`` or ``match`` is an error) and, when it has a ``canonical`` form,
groups answers by that form first and calls ``match`` only to merge new forms into classes
(at most O(n^2) calls for n samples, see :func:`~metagen.answers.key.group_by_canonical`).
Deterministic tie-breaking (documented contract): among answers with equal votes the one whose
first occurrence has the LOWEST sample index wins; self-consistency returns that first
occurrence, weighted voting the highest-weight sample of the winning answer (lowest index among
equal weights). When no sample has an answer, the first sample is returned with answer None.
This makes ``mbr`` with the answer-match utility select exactly what self-consistency selects.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.answers.key import AnswerKey, resolve_answer_key
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import RewardLike
from metagen.scorers.callables import as_reward, check_scores
from metagen.scorers.verifiers import Extract, Match, default_extract, default_match
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import run_parallel
from metagen.strategies.selection import (
    Selection,
    argmax_first,
    flatten,
    group_answers,
    scorers_usage,
)
from metagen.strategies.spec import StrategySpec, param
from metagen.types import Completion, Result, SamplingParams, Usage


def vote(classes: Sequence[int | None], weights: Sequence[float],
         aggregate: Literal["sum", "mean"] = "sum") -> tuple[int | None, dict[int, float]]:
    """(winning class, class -> value). Ties: the class appearing first wins; None abstains."""
    totals: dict[int, float] = {}
    counts: dict[int, int] = {}
    for cls, w in zip(classes, weights):
        if cls is not None:
            totals[cls] = totals.get(cls, 0.0) + w
            counts[cls] = counts.get(cls, 0) + 1
    if aggregate == "mean":
        totals = {k: v / counts[k] for k, v in totals.items()}
    if not totals:
        return None, {}
    order = sorted(totals)  # class ids are numbered by first appearance
    return order[argmax_first([totals[k] for k in order])], totals


class _Voter:
    def __init__(self, extract: Extract | None, match: Match | None,
                 answer_key: AnswerKey | None = None) -> None:
        extract, match, self.canonical = resolve_answer_key(answer_key, extract, match)
        self.extract = extract or default_extract()
        self.match = match or default_match()

    def answer_classes(self, group: Sequence[Completion]
                       ) -> tuple[list[Any], list[int | None]]:
        """``(answers, classes)`` of a group of samples: ``answers[i]`` is ``extract`` of sample
        ``i``'s text (``None`` when it has none) and ``classes[i]`` its answer class (ids in
        order of first appearance, ``None`` for no answer), grouped with ``match`` and the
        answer key's ``canonical`` form as :func:`metagen.answers.group_by_canonical` does.
        Makes no model call; what ``extract`` or ``match`` raise propagates."""
        answers = [self.extract(c.text) for c in group]
        return answers, group_answers(answers, self.match, self.canonical)


class SelfConsistency(_Voter):
    """Selector: majority vote; ``scores[i]`` is the vote share of sample i's answer."""

    name = "self_consistency"

    def __init__(self, extract: Extract | None = None, match: Match | None = None, *,
                 answer_key: AnswerKey | None = None) -> None:
        super().__init__(extract, match, answer_key)

    @property
    def usage(self) -> Usage:
        return Usage()

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]:
        out = []
        for group in groups:
            answers, classes = self.answer_classes(group)
            winner, totals = vote(classes, [1.0] * len(group))
            index = 0 if winner is None else classes.index(winner)
            scores = [None if c is None else totals[c] / len(group) for c in classes]
            out.append(Selection(index, scores, vote_trace(answers, classes, winner, totals)))
        return out


class WeightedVote(_Voter):
    """Selector: votes weighted by ``reward`` (one batched reward call) or by
    ``exp(cumulative_logprob / tokens)`` when ``reward="logprob"``. Weights must be >= 0.

    ``keep_top`` (in (0, 1]): only the ``ceil(keep_top * len(group))`` highest-weighted samples
    of each group vote (ties at the threshold all vote) — DeepConf's offline filtering (Fu et
    al. 2025), which drops the least confident traces before a confidence-weighted vote."""

    name = "weighted_vote"

    def __init__(self, reward: RewardLike | Literal["logprob"] = "logprob", *,
                 aggregate: Literal["sum", "mean"] = "sum",
                 extract: Extract | None = None, match: Match | None = None,
                 keep_top: float | None = None, answer_key: AnswerKey | None = None) -> None:
        super().__init__(extract, match, answer_key)
        if aggregate not in ("sum", "mean"):
            raise InvalidParameterError("aggregate", aggregate, "must be 'sum' or 'mean'")
        if keep_top is not None and not (isinstance(keep_top, (int, float))
                                         and not isinstance(keep_top, bool)
                                         and 0.0 < keep_top <= 1.0):
            raise InvalidParameterError("keep_top", keep_top, "must be in (0, 1]")
        self.aggregate = aggregate
        self.keep_top = keep_top
        self.reward = None if reward == "logprob" else as_reward(reward)

    @property
    def usage(self) -> Usage:
        return scorers_usage(self.reward)

    def _weights(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
                 ) -> list[float]:
        flat_p, flat_c, _ = flatten(prompts, groups)
        if self.reward is not None:
            weights = check_scores(self.reward.score(flat_p, flat_c), len(flat_c),
                                   who=type(self.reward).__name__)
        else:
            weights = [_normalised_prob(c) for g in groups for c in g]
        for w in weights:
            if w < 0:
                raise InvalidParameterError("reward", w, "weighted voting needs non-negative "
                                            "weights (use a probability, e.g. sigmoid(logit))")
        return weights

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]:
        weights = self._weights(prompts, groups)
        out, start = [], 0
        for group in groups:
            raw = weights[start:start + len(group)]
            start += len(group)
            answers, classes = self.answer_classes(group)
            w = raw if self.keep_top is None else keep_top_weights(raw, self.keep_top)
            winner, totals = vote(classes, w, self.aggregate)
            if winner is None:
                index = 0
            else:
                members = [i for i, c in enumerate(classes) if c == winner]
                index = members[argmax_first([w[i] for i in members])]
            trace = vote_trace(answers, classes, winner, totals)
            trace["weights"] = list(raw)
            if self.keep_top is not None:
                trace["voting_weights"] = list(w)
            out.append(Selection(index, list(raw), trace))
        return out


def keep_top_weights(weights: Sequence[float], fraction: float) -> list[float]:
    """``weights`` with all but the ``ceil(fraction * len)`` largest set to 0 (ties at the
    threshold kept)."""
    if not weights:
        return []
    k = max(1, math.ceil(fraction * len(weights) - 1e-9))
    threshold = sorted(weights, reverse=True)[k - 1]
    return [x if x >= threshold else 0.0 for x in weights]


def _normalised_prob(c: Completion) -> float:
    if c.cumulative_logprob is None or not c.num_tokens:
        raise CapabilityError("weighted_vote with reward='logprob' needs completions with "
                              "cumulative_logprob and tokens (a backend with logprobs)")
    return math.exp(c.cumulative_logprob / c.num_tokens)


def vote_trace(answers: list[Any], classes: list[int | None], winner: int | None,
               totals: dict[int, float]) -> dict[str, Any]:
    """The trace of a vote: each sample's answer, the votes per answer class (named by its
    first answer), the winner's answer and how many samples abstained (no answer)."""
    first: dict[int, str] = {}
    for answer, cls in zip(answers, classes):
        if cls is not None and cls not in first:
            first[cls] = str(answer)
    return {"answers": [None if a is None else str(a) for a in answers],
            "votes": {first[c]: v for c, v in sorted(totals.items())},
            "answer": None if winner is None else first[winner],
            "abstained": sum(c is None for c in classes)}


def self_consistency(generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16,
                     extract: Extract | None = None, match: Match | None = None,
                     params: SamplingParams | None = None, budget: Budget | None = None,
                     min_successful: int = 1, answer_key: AnswerKey | None = None
                     ) -> Result | list[Result]:
    """Majority vote over ``n`` samples' answers (one generate call). See the module docstring
    for tie-breaking and ``answer_key``; ``trace`` holds ``answers``, ``votes`` and the winning
    ``answer``."""
    return run_parallel(generator, prompt, SelfConsistency(extract, match, answer_key=answer_key),
                        n=n, params=params,
                        budget=budget, min_successful=min_successful)


def weighted_vote(generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16,
                  reward: RewardLike | Literal["logprob"] = "logprob",
                  aggregate: Literal["sum", "mean"] = "sum",
                  extract: Extract | None = None, match: Match | None = None,
                  params: SamplingParams | None = None, budget: Budget | None = None,
                  min_successful: int = 1, keep_top: float | None = None,
                  answer_key: AnswerKey | None = None) -> Result | list[Result]:
    """Reward-weighted vote over ``n`` samples (one generate call, one reward call); with
    ``keep_top``, only that top fraction of the samples by weight votes."""
    return run_parallel(generator, prompt, WeightedVote(reward, aggregate=aggregate,
                                                        extract=extract, match=match,
                                                        keep_top=keep_top,
                                                        answer_key=answer_key),
                        n=n, params=params, budget=budget, min_successful=min_successful)


@dataclass(frozen=True, slots=True)
class SelfConsistencyConfig:
    """self_consistency's parameters besides N."""

    min_successful: int = param(1, "fewest successful samples to vote", lo=1)


@dataclass(frozen=True, slots=True)
class WeightedVoteConfig:
    """weighted_vote's parameters besides N."""

    aggregate: Literal["sum", "mean"] = param("sum", "sum or mean of an answer's weights")
    keep_top: float | None = param(None, "only this top fraction of the samples by weight votes",
                                   lo=0.0, lo_open=True, hi=1.0)
    min_successful: int = param(1, "fewest successful samples to vote", lo=1)


def _self_consistency(scorer: Any, key: AnswerKey | None, options: Mapping[str, Any]
                      ) -> SelfConsistency:
    return SelfConsistency(answer_key=key)


def _weighted(reward: Any, key: AnswerKey | None, options: Mapping[str, Any]) -> WeightedVote:
    return WeightedVote("logprob" if reward is None else reward, answer_key=key,
                        aggregate=options.get("aggregate", "sum"),
                        keep_top=options.get("keep_top"))


SPECS = [
    StrategySpec("self_consistency", self_consistency, "subsampled", "self-consistency",
                 SelfConsistencyConfig, selector_factory=_self_consistency),
    StrategySpec("weighted_vote", weighted_vote, "subsampled", "weighted vote (ORM)",
                 WeightedVoteConfig, optional=frozenset({"reward"}),
                 scorer_args={"reward": "reward"}, selector_factory=_weighted),
    StrategySpec("weighted_vote_confidence", weighted_vote, "subsampled",
                 "weighted vote (confidence)", WeightedVoteConfig,
                 needs=frozenset({"confidence"}), scorer_args={"confidence": "reward"},
                 selector_factory=_weighted,
                 not_on={"serve": "weighted_vote without a reward weighs by the policy's own "
                                  "confidence",
                         "openai": "the confidence verifier reads a local model's logits"}),
]
