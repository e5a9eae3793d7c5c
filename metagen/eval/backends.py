"""What a process does items with (:class:`Backends`): the policy, the scorers the strategies
read, each loaded once, and their cost model."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.config import PRM, EvalConfig
from metagen.eval.cost import CostModel, cost_model_for
from metagen.eval.runrows import REWARD
from metagen.eval.selectors import CONFIDENCE
from metagen.scorers.callables import as_reward

Loader = Callable[[], Any]


@dataclass(slots=True, frozen=True)
class Backends:
    """What a process does items with: the policy, the scorers by name (:data:`REWARD`,
    :data:`CONFIDENCE`, :data:`PRM`) and their :class:`~metagen.eval.cost.CostModel`."""

    generator: Any
    scorers: Mapping[str, Any] = field(default_factory=dict)
    cost: CostModel = field(default_factory=CostModel)


def load_backends(config: EvalConfig, generator: Any, loaders: Mapping[str, Loader | None]
                  ) -> Backends:
    """The scorers ``config``'s strategies need, each loaded once with ``loaders[name]``
    (the reward model wrapped as a reward), and the cost model of them all."""
    raw = {name: loaders[name]() for name in sorted(config.scorers_needed)  # type: ignore[misc]
           if loaders.get(name)}
    scorers = {k: as_reward(v) if k != PRM else v for k, v in raw.items()}
    return Backends(generator, scorers, cost_model_for(generator, raw))


def check_loaders(config: EvalConfig, loaders: Mapping[str, Loader | None]) -> None:
    """``InvalidParameterError`` naming the flag of a scorer the strategies need and lack."""
    flags = {REWARD: ("reward", "--reward SPEC"), PRM: ("prm", "--prm SPEC"),
             CONFIDENCE: ("confidence", "a confidence scorer (the policy's LikelihoodVerifier)")}
    for name in sorted(config.scorers_needed):
        if loaders.get(name) is None:
            param, what = flags[name]
            raise InvalidParameterError(param, None, f"{config.strategy} needs {what}")


