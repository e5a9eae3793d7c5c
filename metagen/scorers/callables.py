"""Plain Python callables as scorers, and the checks every score goes through.

:func:`as_reward` turns anything reward-like into a batched :class:`RewardModel`:

- an object with ``score(prompts, completions) -> list[float]`` is used as is;
- a callable ``fn(prompt, completion) -> float`` is called once per pair
  (:class:`CallableReward`); pass ``batched=True`` to call ``fn(prompts, completions)`` once.
  The callable receives each prompt as the strategy got it: a string, or a list of chat
  messages (render or read them as the callable needs).

:func:`check_scores` is the gate between a scorer and a strategy: the right count of finite real
numbers, else an error. A failed scorer call is never turned into a score.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, cast

from metagen.errors import InvalidParameterError, NumericalError
from metagen.generators.base import Prompt
from metagen.scorers.base import RewardLike, RewardModel, check_same_length


class CallableReward:
    """A batched :class:`RewardModel` over a Python callable.

    ``fn(prompt, completion) -> float`` per pair, or ``fn(prompts, completions) -> list[float]``
    when ``batched=True``. Exceptions from ``fn`` propagate unchanged.
    """

    __slots__ = ("fn", "batched")

    def __init__(self, fn: Callable[..., Any], *, batched: bool = False) -> None:
        if not callable(fn):
            raise InvalidParameterError("fn", fn, "must be callable")
        self.fn = fn
        self.batched = batched

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        """Scores of ``fn`` over the pairs; a chat prompt reaches ``fn`` as its messages."""
        check_same_length(prompts, completions, "completions")
        if self.batched:
            out = self.fn(list(prompts), list(completions))
        else:
            out = [self.fn(p, c) for p, c in zip(prompts, completions)]
        return check_scores(out, len(prompts), who=_name(self.fn))


def as_reward(reward: RewardLike) -> RewardModel:
    """A batched :class:`RewardModel` from a scorer or a ``(prompt, completion)`` callable."""
    if reward is None:
        raise InvalidParameterError("reward", reward, "a reward model or callable is required")
    if callable(getattr(reward, "score", None)):
        return cast(RewardModel, reward)
    if callable(reward):
        return CallableReward(reward)
    raise InvalidParameterError(
        "reward", reward,
        "must have score(prompts, completions) or be callable(prompt, completion)")


def check_scores(scores: Any, n: int, *, who: str = "scorer") -> list[float]:
    """Validate a scorer's output: ``n`` finite real numbers (bools are not scores).

    Raises ``NumericalError`` for NaN/inf and ``TypeError``/``ValueError`` for a wrong type or
    count; never substitutes a value.
    """
    try:
        values = list(scores)
    except TypeError as exc:
        raise TypeError(
            f"{who} returned {type(scores).__name__}, expected a list of floats") from exc
    if len(values) != n:
        raise ValueError(f"{who} returned {len(values)} scores for {n} inputs")
    out: list[float] = []
    for i, value in enumerate(values):
        if isinstance(value, (bool, str, bytes)):
            raise TypeError(f"{who} returned {value!r} at {i}; scores must be numbers")
        if not isinstance(value, (int, float)):
            try:
                value = float(value)  # numpy / torch scalars
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{who} returned a non-number {value!r} at {i}") from exc
        if not math.isfinite(value):
            raise NumericalError(f"{who} returned a non-finite score {value!r} at {i}", row=i)
        out.append(float(value))
    return out


def _name(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__
