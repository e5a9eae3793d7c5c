"""Scoring a fitted :class:`~metagen.frontier.policy.FlopsPolicy` on the held-out items, and the
Pareto frontier of the candidates there (pure functions).

Per fitted budget ``B``: the policy's accuracy (mean, stderr), its mean FLOPs per item and how
many items each candidate got (and ``fit_flops``, its mean FLOPs per item on the fit split,
which may exceed ``B`` a little: see :mod:`metagen.frontier.policy`); ``best_fixed``, the best
candidate allowed at ``B`` (on the fit split, as the policy's choices are) chosen on the
held-out items themselves (an upper bound on any fixed choice), and the policy's paired
``gain`` over it with ``gain_stderr``; ``fit_best``, the fit split's fixed choice at ``B``
(what one would run without bins), and ``gain_vs_fit_best`` [mean, stderr].

A candidate is on the frontier when no other has at least its held-out accuracy at no more mean
FLOPs per item, one of the two strictly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from metagen.compute_optimal import difficulty_keys, item_stat, paired
from metagen.errors import InvalidParameterError
from metagen.eval.breakdown import Accuracy, accuracy_table
from metagen.frontier.budgets import allowed
from metagen.frontier.candidates import SLOT, Candidates
from metagen.frontier.policy import FlopsPolicy, best_allowed


def candidate_stats(cands: Candidates, items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """name -> its model, strategy, N, and accuracy (mean, stderr) and mean FLOPs per item
    over ``items``."""
    acc = accuracy_table(cands.pooled.rows)
    return {name: {"model": model, "strategy": strategy, "n": n,
                   **item_stat(acc[(name, SLOT)], items),
                   "flops": cands.mean_flops(name, items)}
            for name, (model, strategy, n) in sorted(cands.parts.items())}


def pareto(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """The names of ``points`` (name -> (mean FLOPs, accuracy)) that no other point dominates
    (at least the accuracy at no more FLOPs, one strictly), by FLOPs then name."""
    def dominated(name: str) -> bool:
        x, y = points[name]
        return any(ox <= x and oy >= y and (ox < x or oy > y)
                   for other, (ox, oy) in points.items() if other != name)
    return sorted((n for n in points if not dominated(n)), key=lambda n: (points[n][0], n))


def held_out_frontier(policy: FlopsPolicy, cands: Candidates, fit: Sequence[str],
                      held: Sequence[str]) -> list[dict[str, Any]]:
    """One row per fitted budget (see the module docstring), budgets ascending.
    ``InvalidParameterError`` naming ``difficulty`` when a held-out item has no difficulty
    key of the policy's source."""
    keys = difficulty_keys(cands.pooled, policy.binning.source)
    missing = [i for i in [*fit, *held] if i not in keys]
    if missing:
        raise InvalidParameterError("difficulty", policy.binning.source, f"{len(missing)} "
                                    f"item(s) have no difficulty (e.g. {missing[0]!r})")
    acc = accuracy_table(cands.pooled.rows)
    fit_keys = {i: keys[i] for i in sorted(fit)}
    held_keys = {i: keys[i] for i in sorted(held)}
    return [_row(policy, cands, acc, budget, fit_keys, held_keys)
            for budget in sorted(policy.overall)]


def _row(policy: FlopsPolicy, cands: Candidates, acc: Accuracy, budget: float,
         fit_keys: Mapping[str, str | float], keys: Mapping[str, str | float]
         ) -> dict[str, Any]:
    """One budget of :func:`held_out_frontier`."""
    items = list(keys)
    chosen = policy.apply(keys, budget)
    mine = {i: acc[(c, SLOT)][i] for i, c in chosen.items()}
    fit_best = policy.overall[budget]
    best = best_allowed(cands, acc, items, allowed(cands, list(fit_keys), budget)) or fit_best
    gain, gain_err = paired(mine, acc[(best, SLOT)], items)
    uses = {c: sum(1 for x in chosen.values() if x == c) for c in sorted(set(chosen.values()))}
    return {"budget": budget, "items": len(items),
            "policy": {**item_stat(mine, items), "uses": uses,
                       "flops": _mean_flops(cands, chosen),
                       "fit_flops": _mean_flops(cands, policy.apply(fit_keys, budget))},
            "best_fixed": best, "gain": gain, "gain_stderr": gain_err,
            "fit_best": fit_best,
            "gain_vs_fit_best": list(paired(mine, acc[(fit_best, SLOT)], items))}


def _mean_flops(cands: Candidates, chosen: Mapping[str, str]) -> float:
    """Mean FLOPs per item of ``chosen`` (item -> candidate)."""
    return math.fsum(cands.pooled.tokens[(i, c, SLOT)] for i, c in chosen.items()) / len(chosen)
