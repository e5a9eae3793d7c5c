"""The strategies the runner derives at every N from one set of samples, as the library's own
selectors, and the stored-score reward they read."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.eval.runrows import REWARD
from metagen.generators.base import Prompt
from metagen.strategies import MBR, BestOfN, SelfConsistency, WeightedVote
from metagen.strategies.selection import Selector

CONFIDENCE = "confidence"  # the policy's own confidence in each sample (LikelihoodVerifier)

#: strategies evaluated by subsampling ONE set of samples -> the stored scores they read (the
#: scorer's name in the store), or None
SUBSAMPLED: dict[str, str | None] = {
    "self_consistency": None, "best_of_n": REWARD, "weighted_vote": REWARD, "mbr": None,
    "best_of_n_confidence": CONFIDENCE, "weighted_vote_confidence": CONFIDENCE}


class StoredReward:
    """A reward model over one item's stored scores, keyed by completion text (a deterministic
    reward gives equal texts equal scores). A text without a score raises ``KeyError``."""

    def __init__(self, texts: Sequence[str], scores: Sequence[float]) -> None:
        self.table = dict(zip(texts, scores))

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        return [self.table[c] for c in completions]


def make_selector(strategy: str, answer_key: AnswerKey | None,
                  rewards: Mapping[str, StoredReward], args: Mapping[str, Any]) -> Selector:
    """The selector of ``strategy`` (a key of :data:`SUBSAMPLED`) with ``args`` passed to it;
    ``rewards`` maps scorer names to the item's stored scores. MBR uses the answer-match utility
    over ``answer_key`` unless ``args`` says otherwise. Raises ``InvalidParameterError`` naming
    ``strategy``, or ``reward`` when the scores the strategy reads are missing."""
    if strategy not in SUBSAMPLED:
        raise InvalidParameterError("strategy", strategy,
                                    f"must be one of {', '.join(SUBSAMPLED)} in this version")
    needs = SUBSAMPLED[strategy]
    reward = rewards.get(needs) if needs else None
    if needs and reward is None:
        raise InvalidParameterError("reward", None, f"{strategy} needs {needs} scores")
    if strategy == "self_consistency":
        return SelfConsistency(answer_key=answer_key, **args)
    if strategy == "mbr":
        return MBR(**{"answer_key": answer_key, **args})
    if strategy.startswith("weighted_vote"):
        return WeightedVote(reward, answer_key=answer_key, **args)  # type: ignore[arg-type]
    return BestOfN(reward, **args)  # type: ignore[arg-type]
