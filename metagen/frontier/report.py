"""``frontier_report``: load runs of several models, split the items, fit the FLOPs-budget policy
and score it on the held-out items, as one JSON-able dict (what ``metagen compute-optimal --axis
flops`` prints, writes and plots)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from metagen.compute_optimal import split_items
from metagen.eval.difficulty import DEFAULT_BINS, Source
from metagen.frontier.budgets import budget_grid, check_budgets
from metagen.frontier.candidates import Entry, load_candidates
from metagen.frontier.held_out import candidate_stats, held_out_frontier, pareto
from metagen.frontier.policy import fit_flops_policy


def frontier_report(entries: Sequence[Entry], *, fit_fraction: float = 0.5, split_seed: int = 0,
                    difficulty: Source | Literal["auto"] = "auto", bins: int = DEFAULT_BINS,
                    min_gain_stderr: float = 1.0,
                    budgets: Sequence[float] | None = None) -> dict[str, Any]:
    """The report of the runs ``entries`` (each a folder or a (label or None, folder) pair):
    ``runs`` (folder, model), ``split``, ``min_gain_stderr``, ``budgets`` (given, else the
    default grid over the candidates' fit-split mean FLOPs), ``unfitted`` (budgets that allow no
    candidate), ``candidates`` (name -> model, strategy, n, ``fit_flops`` and held-out
    ``mean``/``stderr``/``flops``), ``skipped``, ``policy``, ``held_out`` (one row per fitted
    budget) and ``frontier`` (candidate names, by held-out FLOPs). Raises
    ``InvalidParameterError`` naming the parameter at fault."""
    grid = None if budgets is None else check_budgets(budgets)
    cands = load_candidates(entries)
    fit, held = split_items(cands.pooled.items, fit_fraction, split_seed)
    if grid is None:
        grid = budget_grid(cands.mean_flops(n, fit) for n in cands.names)
    policy = fit_flops_policy(cands, fit, grid, difficulty=difficulty, bins=bins,
                              min_gain_stderr=min_gain_stderr)
    stats = candidate_stats(cands, held)
    for name, entry in stats.items():
        entry["fit_flops"] = cands.mean_flops(name, fit)
    return {"axis": "flops",
            "runs": [{"folder": folder, "model": model} for folder, model in cands.runs],
            "split": {"fit_fraction": fit_fraction, "seed": split_seed, "fit": len(fit),
                      "held_out": len(held)},
            "min_gain_stderr": min_gain_stderr, "budgets": grid,
            "unfitted": [b for b in grid if b not in policy.overall],
            "candidates": stats, "skipped": list(cands.skipped), "policy": policy.to_dict(),
            "held_out": held_out_frontier(policy, cands, fit, held),
            "frontier": pareto({n: (s["flops"], s["mean"]) for n, s in stats.items()})}
