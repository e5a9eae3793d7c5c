"""Small pure metrics used by the testbed's evaluation."""

from __future__ import annotations

from collections.abc import Sequence


def auroc(scores: Sequence[float], labels: Sequence[bool | int]) -> float:
    """Area under the ROC curve = P(score of a random positive > score of a random negative),
    ties counting one half (Mann-Whitney U). ``nan`` if either class is empty."""
    if len(scores) != len(labels):
        raise ValueError(f"scores ({len(scores)}) and labels ({len(labels)}) differ in length")
    pairs = sorted(zip(scores, labels), key=lambda x: x[0])
    n_pos = sum(1 for _, y in pairs if y)
    n_neg = len(pairs) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    rank_sum, i = 0.0, 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        avg_rank = (i + 1 + j) / 2
        rank_sum += avg_rank * sum(1 for _, y in pairs[i:j] if y)
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def split_steps(completion: str) -> list[str]:
    """The steps of a completion: its lines, each keeping its trailing ``\\n`` (the last may lack
    one). ``"".join(split_steps(c)) == c``."""
    return completion.splitlines(keepends=True)
