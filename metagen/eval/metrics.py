"""Per-item metrics at every N from ONE set of ``n_max`` samples, and their summary.

``pass@k``: the unbiased estimator over all ``n_max`` samples. A selector's accuracy at N
(majority@N for self-consistency, best-of-N, weighted vote): the mean correctness of what the
library's own :class:`~metagen.strategies.selection.Selector` picks over size-N subsets of the
samples (:func:`~metagen.eval.estimators.subsets`: all of them when few, else a fixed number
from a seeded RNG), so smaller N are derived without the bias of a single nested prefix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.eval.estimators import mean_stderr, subsets
from metagen.tasks.pass_at_k import pass_at_k
from metagen.eval.seeds import subset_seed
from metagen.eval.store import ItemResult, StoredSample
from metagen.generators.base import Prompt
from metagen.strategies.selection import Selector

PASS_AT_K = "pass@k"
ACCURACY = "accuracy"
SAMPLES = "samples"  # the strategy name of sample-level metrics (pass@k)


def item_results(item_id: str, prompt: Prompt, samples: Sequence[StoredSample], ns: Sequence[int],
                 selectors: Mapping[str, Selector], *, run_seed: int, max_subsets: int
                 ) -> list[ItemResult]:
    """pass@k and each selector's accuracy at each N for one item. ``samples`` are the item's
    ``max(ns)`` successful samples in index order (index j at position j)."""
    n_max = len(samples)
    correct = [s.correct for s in samples]
    out = [ItemResult(SAMPLES, n, PASS_AT_K, pass_at_k(n_max, sum(correct), n),
                      {"n": n_max, "c": sum(correct)}) for n in ns]
    for n in ns:
        subs = subsets(n_max, n, max_subsets, subset_seed(run_seed, item_id, n))
        groups = [[samples[j].completion for j in sub] for sub in subs]
        for name, selector in selectors.items():
            chosen = [sub[sel.index] for sub, sel in
                      zip(subs, selector.select([prompt] * len(groups), groups))]
            value = sum(correct[j] for j in chosen) / len(chosen)
            out.append(ItemResult(name, n, ACCURACY, value,
                                  {"subsets": len(subs), "chosen": chosen}))
    return out


def summarize(rows: Sequence[tuple[str, str, int, str, float]]) -> list[dict[str, Any]]:
    """Rows (item, strategy, n, metric, value) -> one dict per (strategy, n, metric) with the
    mean over items, its standard error and the item count, sorted."""
    groups: dict[tuple[str, int, str], list[float]] = {}
    for _, strategy, n, metric, value in rows:
        groups.setdefault((strategy, n, metric), []).append(value)
    out = []
    for (strategy, n, metric), values in sorted(groups.items()):
        mean, stderr = mean_stderr(values)
        out.append({"strategy": strategy, "n": n, "metric": metric, "mean": mean,
                    "stderr": stderr, "items": len(values)})
    return out
