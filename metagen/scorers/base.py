"""Scorer protocols. Scorers take whole batches; a plain Python callable works wherever one does.

- :class:`RewardModel` (outcome reward): ``score(prompts, completions) -> list[float]``, one score
  per (prompt, completion) pair, higher is better.
- :class:`ProcessRewardModel`: ``score_steps(prompts, steps) -> list[list[float]]``, one score per
  step of each partial solution; aggregated to one number by :func:`aggregate_steps`.
- :class:`Utility` (MBR): ``matrix(hyps, refs) -> list[list[float]]`` with ``out[i][j]`` the
  utility of hypothesis ``i`` against pseudo-reference ``j``.

Prompts are :data:`~metagen.generators.base.Prompt`: a string, or chat messages
(``[{"role": ..., "content": ...}]``) exactly as the strategy got them -- never a join of the
messages. A scorer that reads text lays a chat prompt out the way its model was trained (its
tokenizer's chat template, or its declared format); a scorer that cannot raises
``InvalidPromptError`` naming ``prompts`` before any work. Plain callables receive the prompt as
is.

Scorers that run a model also expose ``usage`` (cumulative :class:`~metagen.types.Usage` with
``scorer_tokens``, ``scorer_calls`` and ``scorer_flops``) so strategies can account for them.
A scorer that fails raises; it never returns a made-up score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

from metagen.errors import InvalidParameterError, InvalidPromptError, NumericalError
from metagen.generators.base import Prompt

StepAggregation = Literal["last", "min", "prod", "mean"]


@runtime_checkable
class RewardModel(Protocol):
    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]: ...


@runtime_checkable
class ProcessRewardModel(Protocol):
    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]: ...


@runtime_checkable
class Utility(Protocol):
    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]: ...


class AggregatingUtility(Utility, Protocol):
    """A Utility with reference aggregation: ``aggregate(hyps, refs, weights)[i]`` is the utility
    of hypothesis ``i`` against the ``weights``-weighted mean of ``refs`` (MBR in O(N))."""

    def aggregate(self, hyps: Sequence[str], refs: Sequence[str],
                  weights: Sequence[float]) -> list[float]: ...


# What the strategies accept where a scorer goes: the protocol, or a plain callable.
RewardLike = RewardModel | Callable[[Prompt, str], float]
"""A :class:`RewardModel`, or ``fn(prompt, completion) -> float`` called once per pair (the
prompt as given: a string or the chat messages)."""

ProcessRewardLike = ProcessRewardModel | Callable[[Prompt, list[str]], float | Sequence[float]]
"""A :class:`ProcessRewardModel`, or ``fn(prompt, steps) -> scores`` called once per path
(one score per step, or one number that scores the last step; the prompt as given: a string or
the chat messages)."""

UtilityLike = Utility | Callable[[str, str], float]
"""A :class:`Utility`, or ``u(hyp, ref) -> float`` called once per pair."""


def aggregate_steps(scores: Sequence[float], how: StepAggregation = "last") -> float:
    """One number from per-step scores: the last, the minimum, the product or the mean.

    Raises ``InvalidParameterError`` for an unknown mode or an empty list, ``NumericalError`` for
    a NaN score (a failed scorer is never a score).
    """
    if how not in ("last", "min", "prod", "mean"):
        raise InvalidParameterError("aggregation", how, "must be one of last, min, prod, mean")
    if not scores:
        raise InvalidParameterError("scores", scores, "need at least one step score")
    if any(math.isnan(s) for s in scores):
        raise NumericalError(f"NaN step score in {list(scores)}")
    if how == "last":
        return float(scores[-1])
    if how == "min":
        return float(min(scores))
    if how == "prod":
        return float(math.prod(scores))
    return float(sum(scores) / len(scores))


def check_same_length(prompts: Sequence[object], others: Sequence[object], name: str) -> None:
    """Raise ``InvalidParameterError`` naming ``name`` unless it has one entry per prompt."""
    if len(prompts) != len(others):
        raise InvalidParameterError(name, len(others), f"must match len(prompts)={len(prompts)}")


def check_step_chains(prompts: Sequence[object], steps: Sequence[Sequence[str]]) -> None:
    """One non-empty list of step strings per prompt; else ``InvalidParameterError`` naming
    ``steps``."""
    check_same_length(prompts, steps, "steps")
    for chain in steps:
        if isinstance(chain, str) or not chain:
            raise InvalidParameterError("steps", chain, "each entry must be a non-empty list "
                                        "of step strings")


def text_only(prompts: Sequence[Prompt], who: str) -> list[str]:
    """``prompts`` as strings, for a scorer whose input is a text template; a chat prompt raises
    ``InvalidPromptError`` naming ``prompts`` (before any work) and saying what to pass."""
    for prompt in prompts:
        if not isinstance(prompt, str):
            raise InvalidPromptError(
                "prompts", "<chat messages>", f"{who} formats prompts into a text template; pass "
                "string prompts (e.g. the conversation rendered with the policy's chat template)")
    return [str(p) for p in prompts]
