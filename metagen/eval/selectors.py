"""The stored-score reward the subsampled strategies' selectors read (their selectors are the
registry's: :meth:`~metagen.strategies.spec.StrategySpec.selector`), and the store's name of
the policy's confidence scores."""

from __future__ import annotations

from collections.abc import Sequence

from metagen.generators.base import Prompt

CONFIDENCE = "confidence"  # the policy's own confidence in each sample (LikelihoodVerifier)


class StoredReward:
    """A reward model over one item's stored scores, keyed by completion text (a deterministic
    reward gives equal texts equal scores). A text without a score raises ``KeyError``."""

    def __init__(self, texts: Sequence[str], scores: Sequence[float]) -> None:
        self.table = dict(zip(texts, scores))

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        return [self.table[c] for c in completions]
