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


def within_problem_auroc(scores: Sequence[float], labels: Sequence[bool | int],
                         groups: Sequence[object]) -> tuple[float, float, int]:
    """How well ``scores`` separate right from wrong solutions *of the same problem*
    (``groups[i]`` names sample i's problem): the mean over problems with both right and wrong
    samples of their own :func:`auroc`, the pooled pair accuracy over all their mixed pairs
    (= the pair-weighted mean), and the number of such problems. A score that only knows which
    problems are hard gets 0.5 here, whatever its pooled AUROC. ``(nan, nan, 0)`` when no
    problem is mixed."""
    if not len(scores) == len(labels) == len(groups):
        raise ValueError(f"scores ({len(scores)}), labels ({len(labels)}) and groups "
                         f"({len(groups)}) differ in length")
    by: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        by.setdefault(g, []).append(i)
    aucs, wins, pairs = [], 0.0, 0
    for rows in by.values():
        pos = sum(1 for i in rows if labels[i])
        if 0 < pos < len(rows):
            a = auroc([scores[i] for i in rows], [labels[i] for i in rows])
            aucs.append(a)
            wins += a * pos * (len(rows) - pos)
            pairs += pos * (len(rows) - pos)
    if not aucs:
        return float("nan"), float("nan"), 0
    return sum(aucs) / len(aucs), wins / pairs, len(aucs)
