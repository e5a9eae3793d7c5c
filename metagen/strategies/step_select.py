"""Pure helpers of step-level search: the final choice among candidate nodes (score, vote,
weighted vote), the default GSM8K-style answer extraction, and apportioning a batch's usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

from metagen.errors import InvalidParameterError
from metagen.generators.metered import apportion as split_usage  # noqa: F401 (re-exported)
from metagen.strategies.tree import SearchNode

Select = Literal["score", "vote", "weighted_vote"]  # a step search's final choice (choose_by)


def best_by_score(nodes: Sequence[SearchNode]) -> SearchNode | None:
    """The node with the highest score (unscored count as -inf); ties go to the lowest id."""
    if not nodes:
        return None
    return min(nodes, key=lambda n: (-(n.score if n.score is not None else float("-inf")), n.id))


def default_answer(text: str) -> str | None:
    """The text after the last ``####`` (GSM8K style), stripped; ``None`` when absent."""
    if "####" not in text:
        return None
    answer = text.rsplit("####", 1)[1].strip().replace(",", "").rstrip(".")
    return answer or None


def choose_by(mode: str, nodes: Sequence[SearchNode],
              answer: Callable[[str], str | None] = default_answer) -> SearchNode | None:
    """Final choice among candidate nodes.

    ``"score"``: the highest score. ``"vote"``: majority over extracted answers (Wang et al.
    2023); ``"weighted_vote"``: answers weighted by score (Uesato et al. 2022). For the votes the
    winning answer's highest-scored node is returned; ties between answers go to the answer first
    reached by the lowest node id; candidates without an answer do not vote (when none has one,
    the choice falls back to ``"score"``).
    """
    if mode == "score":
        return best_by_score(nodes)
    if mode not in ("vote", "weighted_vote"):
        raise InvalidParameterError("select", mode, "must be score, vote or weighted_vote")
    tally: dict[str, float] = {}
    first: dict[str, int] = {}
    members: dict[str, list[SearchNode]] = {}
    for node in sorted(nodes, key=lambda n: n.id):
        a = answer(node.text())
        if a is None:
            continue
        weight = 1.0 if mode == "vote" else max(0.0, node.score or 0.0)
        tally[a] = tally.get(a, 0.0) + weight
        first.setdefault(a, node.id)
        members.setdefault(a, []).append(node)
    if not tally:
        return best_by_score(nodes)
    win = min(tally, key=lambda a: (-tally[a], first[a]))
    return best_by_score(members[win])
