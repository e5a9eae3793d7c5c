"""The strategies the runner derives at every N from one set of samples, as the library's own
selectors, and the stored-score reward they read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Prompt
from metagen.strategies import BestOfN, SelfConsistency, WeightedVote
from metagen.strategies.selection import Selector
from metagen.tasks.answer_key import AnswerKey

#: strategies evaluated by subsampling ONE set of samples; True when they need a reward
SUBSAMPLED: dict[str, bool] = {"self_consistency": False, "best_of_n": True,
                               "weighted_vote": True}


class StoredReward:
    """A reward model over one item's stored scores, keyed by completion text (a deterministic
    reward gives equal texts equal scores). A text without a score raises ``KeyError``."""

    def __init__(self, texts: Sequence[str], scores: Sequence[float]) -> None:
        self.table = dict(zip(texts, scores))

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        return [self.table[c] for c in completions]


def make_selector(strategy: str, answer_key: AnswerKey | None, reward: StoredReward | None,
                  args: Mapping[str, Any]) -> Selector:
    """The selector of ``strategy`` (a key of :data:`SUBSAMPLED`) with ``args`` passed to it.
    Raises ``InvalidParameterError`` naming ``strategy`` or ``reward``."""
    if strategy not in SUBSAMPLED:
        raise InvalidParameterError("strategy", strategy,
                                    f"must be one of {', '.join(SUBSAMPLED)} in this version")
    if SUBSAMPLED[strategy] and reward is None:
        raise InvalidParameterError("reward", None, f"{strategy} needs --reward PATH")
    if strategy == "self_consistency":
        return SelfConsistency(answer_key=answer_key, **args)
    if strategy == "weighted_vote":
        return WeightedVote(reward, answer_key=answer_key, **args)  # type: ignore[arg-type]
    return BestOfN(reward, **args)  # type: ignore[arg-type]
