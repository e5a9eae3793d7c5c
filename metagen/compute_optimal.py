"""Compute-optimal choice of strategy (Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally
can be More Effective than Scaling Model Parameters"): from finished runs, a policy
(difficulty bin, budget N) -> strategy, fitted on one split of the items and scored on the other.

    runs = load_runs(["runs/sc", "runs/bon", "runs/wv"])   # same task and items
    fit, held = split_items(runs.items, fit_fraction=0.5)
    policy = fit_policy(runs, fit)
    curve = held_out_curve(policy, runs, held)            # policy vs each fixed strategy
    policy.apply({"item-7": "d3"}, budget=16)             # -> {"item-7": "best_of_n"}

Bins come from :mod:`metagen.eval.difficulty` (task labels, or quantiles of pass@1 ("oracle") or
of the mean reward score ("predicted"), their thresholds fitted on the fit split). In each bin
the policy takes the bin's winner on the fit split (:func:`~metagen.eval.breakdown.winner`:
accuracy, then fewer tokens, then name) only when it beats the overall winner at that budget on
the bin's fit items by more than ``min_gain_stderr`` paired standard errors; else the overall
winner, so that fit-split noise in a small bin does not pick a worse strategy. A bin or budget
the fit split never saw falls back on the overall winner.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from metagen.errors import InvalidParameterError
from metagen.eval.breakdown import Accuracy, accuracy_table, mean_tokens, winner
from metagen.eval.difficulty import DEFAULT_BINS, Binning, Source, choose_binning
from metagen.eval.estimators import mean_stderr
from metagen.eval.runrows import RunRows
from metagen.eval.runset import load_runs

__all__ = ["Policy", "compute_optimal", "difficulty_keys", "fit_policy", "guarded",
           "held_out_curve", "item_stat", "load_runs", "paired", "split_items"]


@dataclass(slots=True, frozen=True)
class Policy:
    """(bin, budget) -> strategy. ``overall``: budget -> the fit split's overall winner (the
    fallback); ``table``: (bin, budget) -> strategy; ``binning``: how an item gets its bin."""

    binning: Binning
    table: Mapping[tuple[str, int], str]
    overall: Mapping[int, str]

    def strategy(self, bin_label: str, budget: int) -> str:
        """The strategy for an item of ``bin_label`` at ``budget``; a budget the policy was
        not fitted at raises ``InvalidParameterError`` naming ``budget``."""
        if budget not in self.overall:
            raise InvalidParameterError("budget", budget, "must be one of the fitted budgets "
                                        f"{sorted(self.overall)}")
        return self.table.get((bin_label, budget), self.overall[budget])

    def apply(self, difficulty: Mapping[str, str | float], budget: int) -> dict[str, str]:
        """item -> strategy at ``budget``, given each item's difficulty key: its task label
        (``task`` binning) or its pass@1 / mean reward score (``oracle`` / ``predicted``)."""
        return {item: self.strategy(self.binning.bin_of(key), budget)
                for item, key in difficulty.items()}

    def to_dict(self) -> dict[str, Any]:
        return {"binning": self.binning.to_dict(), "overall": {str(n): s for n, s in
                                                              sorted(self.overall.items())},
                "table": [{"bin": b, "n": n, "strategy": s}
                          for (b, n), s in sorted(self.table.items(), key=self._order)]}

    def _order(self, entry: tuple[tuple[str, int], str]) -> tuple[int, int]:
        (b, n), _ = entry
        order = self.binning.order
        return (order.index(b) if b in order else len(order), n)


def split_items(items: Sequence[str], fit_fraction: float = 0.5, seed: int = 0
                ) -> tuple[list[str], list[str]]:
    """(fit items, held-out items): item i is in the fit split when
    ``sha256(seed, i)``, read as a fraction of 2**64, is below ``fit_fraction`` (so an item's
    side does not depend on the others). Raises ``InvalidParameterError`` naming
    ``fit_fraction`` outside (0, 1) or when a side is empty."""
    if not isinstance(fit_fraction, (int, float)) or not 0 < fit_fraction < 1:
        raise InvalidParameterError("fit_fraction", fit_fraction, "must be in (0, 1)")
    fit: list[str] = []
    held: list[str] = []
    for item in sorted(items):
        digest = hashlib.sha256(f"{seed}\x00{item}".encode("utf-8", "surrogatepass")).digest()
        (fit if int.from_bytes(digest[:8], "big") / 2**64 < fit_fraction else held).append(item)
    if not fit or not held:
        raise InvalidParameterError("fit_fraction", fit_fraction, f"leaves a side of the "
                                    f"{len(items)} items empty (fit {len(fit)}, held-out "
                                    f"{len(held)})")
    return fit, held


def difficulty_keys(run: RunRows, source: Source) -> dict[str, str | float]:
    """item -> what ``source`` bins it by (label, pass@1 or mean reward score), where known."""
    table: Mapping[str, Any] = {"task": run.labels, "oracle": run.pass1,
                                "predicted": run.mean_score}[source]
    return {i: v for i, v in table.items() if v is not None}


def fit_policy(run: RunRows, items: Sequence[str], *,
               difficulty: Source | Literal["auto"] = "auto", bins: int = DEFAULT_BINS,
               min_gain_stderr: float = 1.0) -> Policy:
    """Fit the policy on ``items`` (the fit split) of ``run`` (see the module docstring)."""
    if not isinstance(min_gain_stderr, (int, float)) or min_gain_stderr < 0:
        raise InvalidParameterError("min_gain_stderr", min_gain_stderr, "must be >= 0")
    binning, bin_of = choose_binning(list(items), run.labels, run.pass1, run.mean_score,
                                     difficulty, bins)
    acc = accuracy_table(run.rows)
    table: dict[tuple[str, int], str] = {}
    overall: dict[int, str] = {}
    for n in sorted({n for _, n in acc}):
        best = winner(acc, run.tokens, n, sorted(items))
        if best is None:
            continue
        overall[n] = best["strategy"]
        for b in binning.order:
            members = sorted(i for i in items if bin_of[i] == b)
            won = winner(acc, run.tokens, n, members)
            if won is not None:
                table[(b, n)] = guarded(acc, n, members, won["strategy"], overall[n],
                                         min_gain_stderr)
    if not overall:
        raise InvalidParameterError("runs", sorted(items)[:3], "no strategy has an accuracy "
                                    "for every fit item at any budget")
    return Policy(binning, table, overall)


def guarded(acc: Accuracy, n: int, items: Sequence[str], bin_best: str, overall: str,
             min_gain_stderr: float) -> str:
    """``bin_best`` when it beats ``overall`` on ``items`` by more than ``min_gain_stderr``
    paired standard errors (strictly more when the error is 0), else ``overall``."""
    if bin_best == overall:
        return overall
    gain, err = paired(acc[(bin_best, n)], acc[(overall, n)], items)
    return bin_best if gain > min_gain_stderr * err else overall


def paired(a: Mapping[str, float], b: Mapping[str, float], items: Sequence[str]
            ) -> tuple[float, float]:
    """Mean of a - b over ``items`` and its standard error (the items are shared)."""
    return mean_stderr([a[i] - b[i] for i in items])


def held_out_curve(policy: Policy, run: RunRows, items: Sequence[str]) -> list[dict[str, Any]]:
    """Per fitted budget: the policy's accuracy on ``items`` (mean, stderr, mean tokens per
    item, how many items each strategy got) and each fixed strategy's (those with every item);
    ``best_fixed``, the best fixed strategy on these very items (an upper bound on any fixed
    choice: it is picked on the items it is scored on) and the policy's paired ``gain`` over it
    with ``gain_stderr``; ``fit_best``, the fixed strategy the fit split picks at that budget
    (what a user would run without bins) and ``gain_vs_fit_best`` [mean, stderr] (None when it
    lacks a held-out item)."""
    acc = accuracy_table(run.rows)
    keys = difficulty_keys(run, policy.binning.source)
    missing = [i for i in items if i not in keys]
    if missing:
        raise InvalidParameterError("difficulty", policy.binning.source, f"{len(missing)} "
                                    f"held-out item(s) have no difficulty (e.g. {missing[0]!r})")
    rows = (_held_out_row(policy, run, acc, n, {i: keys[i] for i in sorted(items)})
            for n in sorted(policy.overall))
    return [r for r in rows if r is not None]


def _held_out_row(policy: Policy, run: RunRows, acc: Accuracy, n: int,
                  keys: Mapping[str, str | float]) -> dict[str, Any] | None:
    """One budget of :func:`held_out_curve`; None when the policy's or every fixed strategy's
    accuracy misses a held-out item at ``n``."""
    items = list(keys)
    chosen = policy.apply(keys, n)
    if not all(i in acc.get((s, n), {}) for i, s in chosen.items()):
        return None
    mine = {i: acc[(s, n)][i] for i, s in chosen.items()}
    fixed = {s: acc[(s, m)] for s, m in sorted(acc)
             if m == n and all(i in acc[(s, m)] for i in items)}
    if not fixed:
        return None
    best = max(sorted(fixed), key=lambda s: item_stat(fixed[s], items)["mean"])
    gain, gain_err = paired(mine, fixed[best], items)
    fit_best = policy.overall[n]
    vs_fit = list(paired(mine, fixed[fit_best], items)) if fit_best in fixed else None
    tokens = [run.tokens.get((i, s, n)) for i, s in chosen.items()]
    uses = {s: sum(1 for c in chosen.values() if c == s) for s in sorted(set(chosen.values()))}
    return {"n": n, "items": len(items),
            "policy": {**item_stat(mine, items), "uses": uses,
                       "tokens": None if None in tokens
                       else math.fsum(t or 0.0 for t in tokens) / len(items)},
            "fixed": {s: {**item_stat(v, items), "tokens": mean_tokens(run.tokens, s, n, items)}
                      for s, v in fixed.items()},
            "best_fixed": best, "gain": gain, "gain_stderr": gain_err,
            "fit_best": fit_best, "gain_vs_fit_best": vs_fit}


def item_stat(values: Mapping[str, float], items: Sequence[str]) -> dict[str, float]:
    """``{"mean", "stderr"}`` of ``values`` over ``items``."""
    mean, err = mean_stderr([values[i] for i in items])
    return {"mean": mean, "stderr": err}


def compute_optimal(folders: Sequence[str | Path], *, fit_fraction: float = 0.5,
                    split_seed: int = 0, difficulty: Source | Literal["auto"] = "auto",
                    bins: int = DEFAULT_BINS, min_gain_stderr: float = 1.0) -> dict[str, Any]:
    """Load ``folders``, split, fit and score: ``{"runs", "split", "policy", "held_out"}``
    (JSON-able; what ``metagen compute-optimal`` prints)."""
    run = load_runs(folders)
    fit, held = split_items(run.items, fit_fraction, split_seed)
    policy = fit_policy(run, fit, difficulty=difficulty, bins=bins,
                        min_gain_stderr=min_gain_stderr)
    return {"runs": [str(Path(f)) for f in folders],
            "split": {"fit_fraction": fit_fraction, "seed": split_seed, "fit": len(fit),
                      "held_out": len(held)},
            "min_gain_stderr": min_gain_stderr, "policy": policy.to_dict(),
            "held_out": held_out_curve(policy, run, held)}
