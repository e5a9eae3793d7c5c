"""Pure helpers of step-level search: the final choice among candidate nodes (score, vote,
weighted vote), the default GSM8K-style answer extraction, and apportioning a batch's usage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.strategies.tree import SearchNode
from metagen.types import Usage


def split_usage(total: Usage, weights: Sequence[float]) -> list[Usage]:
    """``total`` apportioned by ``weights`` (uniform when all are 0); parts sum to ``total``."""
    k = len(weights)
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w)
    share = [x / s for x in w] if s > 0 else [1.0 / k] * k
    cols: dict[str, list[Any]] = {}
    for f in fields(Usage):
        value = getattr(total, f.name)
        if isinstance(value, int):
            raw = [value * x for x in share]
            parts = [int(r) for r in raw]
            order = sorted(range(k), key=lambda i: (parts[i] - raw[i], i))
            for i in order[: value - sum(parts)]:
                parts[i] += 1
            cols[f.name] = parts
        else:
            cols[f.name] = [value * x for x in share]
    return [Usage(**{name: col[i] for name, col in cols.items()}) for i in range(k)]


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
