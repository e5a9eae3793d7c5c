"""The compute-optimal policy over (model, strategy, N) by FLOPs budget: (difficulty bin, budget)
-> candidate, fitted on the fit split of the items (Snell et al. 2024, with the model size as one
more axis of the choice, as in Wu et al. 2024, "Inference Scaling Laws").

At budget ``B`` the overall choice is the best candidate allowed on the fit items (mean FLOPs per
item ``<= B``; :func:`~metagen.frontier.budgets.allowed`), best by
:func:`~metagen.eval.breakdown.winner`: accuracy, then fewer mean FLOPs, then name. A bin's
choice is the best candidate allowed on the bin's fit items, kept only when it beats the overall
choice on them by more than ``min_gain_stderr`` paired standard errors
(:func:`~metagen.compute_optimal.guarded`); else the overall choice. So each chosen candidate
keeps within ``B`` on the items it was allowed on (the bin's, or all fit items for the
fallback), while the policy's mean over all fit items may exceed ``B`` a little where a bin
falls back on an overall choice dearer in that bin (the report gives the policy's fit FLOPs).
Bins come from :func:`~metagen.eval.difficulty.choose_binning`, as in
:func:`~metagen.compute_optimal.fit_policy`. A budget that allows no candidate is not fitted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.compute_optimal import guarded
from metagen.errors import InvalidParameterError
from metagen.eval.breakdown import Accuracy, accuracy_table, winner
from metagen.eval.difficulty import DEFAULT_BINS, Binning, Source, choose_binning
from metagen.frontier.budgets import allowed
from metagen.frontier.candidates import SLOT, Candidates


@dataclass(slots=True, frozen=True)
class FlopsPolicy:
    """(bin, budget) -> candidate name. ``overall``: budget -> the fit split's overall choice
    (the fallback); ``table``: (bin, budget) -> candidate; ``binning``: how an item gets its
    bin."""

    binning: Binning
    table: Mapping[tuple[str, float], str]
    overall: Mapping[float, str]

    def candidate(self, bin_label: str, budget: float) -> str:
        """The candidate for an item of ``bin_label`` at ``budget``; a budget the policy was not
        fitted at raises ``InvalidParameterError`` naming ``budget``."""
        if budget not in self.overall:
            raise InvalidParameterError("budget", budget, "must be one of the fitted budgets "
                                        f"{sorted(self.overall)}")
        return self.table.get((bin_label, budget), self.overall[budget])

    def apply(self, difficulty: Mapping[str, str | float], budget: float) -> dict[str, str]:
        """item -> candidate at ``budget``, given each item's difficulty key (its task label, or
        its pass@1 / mean reward score)."""
        return {item: self.candidate(self.binning.bin_of(key), budget)
                for item, key in difficulty.items()}

    def to_dict(self) -> dict[str, Any]:
        order = self.binning.order
        return {"binning": self.binning.to_dict(),
                "overall": [{"budget": b, "candidate": c}
                            for b, c in sorted(self.overall.items())],
                "table": [{"bin": b, "budget": x, "candidate": c} for (b, x), c in sorted(
                    self.table.items(), key=lambda e: (order.index(e[0][0]) if e[0][0] in order
                                                       else len(order), e[0][1]))]}


def best_allowed(cands: Candidates, acc: Accuracy, items: Sequence[str],
                 names: Sequence[str]) -> str | None:
    """The best of candidates ``names`` on ``items`` (accuracy, then fewer mean FLOPs, then
    name); None when ``names`` is empty."""
    won = winner({(n, SLOT): acc[(n, SLOT)] for n in names}, cands.pooled.tokens, SLOT,
                 list(items))
    return None if won is None else str(won["strategy"])


def fit_flops_policy(cands: Candidates, items: Sequence[str], budgets: Sequence[float], *,
                     difficulty: Source | Literal["auto"] = "auto", bins: int = DEFAULT_BINS,
                     min_gain_stderr: float = 1.0) -> FlopsPolicy:
    """Fit the policy on ``items`` (the fit split) at each of ``budgets`` (see the module
    docstring). ``InvalidParameterError`` naming ``min_gain_stderr`` when negative, naming
    ``budgets`` when none of them allows a candidate."""
    if not isinstance(min_gain_stderr, (int, float)) or min_gain_stderr < 0:
        raise InvalidParameterError("min_gain_stderr", min_gain_stderr, "must be >= 0")
    run = cands.pooled
    binning, bin_of = choose_binning(list(items), run.labels, run.pass1, run.mean_score,
                                     difficulty, bins)
    acc = accuracy_table(run.rows)
    fit = sorted(items)
    members = {b: group for b in binning.order if (group := [i for i in fit if bin_of[i] == b])}
    table: dict[tuple[str, float], str] = {}
    overall: dict[float, str] = {}
    for budget in budgets:
        best = best_allowed(cands, acc, fit, allowed(cands, fit, budget))
        if best is None:
            continue
        overall[budget] = best
        for b, group in members.items():
            won = best_allowed(cands, acc, group, allowed(cands, group, budget))
            if won is not None:
                table[(b, budget)] = guarded(acc, SLOT, group, won, best, min_gain_stderr)
    if not overall:
        cheapest = min(cands.mean_flops(n, fit) for n in cands.names)
        raise InvalidParameterError("budgets", list(budgets), f"none allows a candidate: the "
                                    f"cheapest costs {cheapest:.4g} FLOPs per item on the fit "
                                    "split")
    return FlopsPolicy(binning, table, overall)
