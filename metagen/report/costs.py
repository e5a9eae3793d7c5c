"""Compute per item at each (strategy, N) from a run's store, for the accuracy-against-compute
curves (pure). Every number is the eval's own (:mod:`metagen.eval.cost`); this module only
picks, per item, where it is found, and averages over the items of each (strategy, N):

1. the cost rows the runner stored for the item at that (strategy, N) (generated tokens; FLOPs
   ``None`` when the runner could not know them and stored no row);
2. else (a store from before cost rows) the ``usage`` of the result's trace, the run's measured
   cost (:func:`~metagen.eval.cost.measured_cost`);
3. else the expected cost of N of the item's samples
   (:func:`~metagen.eval.cost.expected_tokens`; the pass@k rows of ``samples``, and old stores),
   whose FLOPs need the models and are ``None``.

A mean is ``None`` when any item's value is unknown, so a point never averages over fewer items
than its accuracy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from metagen.eval.cost import FLOPS, TOKENS, expected_tokens, measured_cost

Cost = dict[str, float | None]  # {"tokens": ..., "flops": ...}, None when not recorded
Row = tuple[str, int, str, float, Any]  # a stored result: (strategy, n, metric, value, trace)


def item_costs(rows: Sequence[Row], sample_tokens: Sequence[int]
               ) -> dict[tuple[str, int], tuple[float, float]]:
    """(strategy, N) -> (tokens, FLOPs) of one item for every (strategy, N) of its stored
    ``rows``, by the rules of the module docstring; NaN where unknown. ``sample_tokens``: the
    token counts of the item's stored samples."""
    stored = {(s, n, m): v for s, n, m, v, _ in rows if m in (TOKENS, FLOPS)}
    usage = {(s, n): t["usage"] for s, n, _, _, t in rows
             if isinstance(t, Mapping) and isinstance(t.get("usage"), Mapping)}
    out: dict[tuple[str, int], tuple[float, float]] = {}
    for strategy, n, *_ in rows:
        key = (strategy, n)
        if (strategy, n, TOKENS) in stored:
            out[key] = (stored[(strategy, n, TOKENS)], stored.get((strategy, n, FLOPS), math.nan))
        elif key in usage:
            out[key] = measured_cost(usage[key])
        else:
            out[key] = (expected_tokens(sample_tokens, n), math.nan)
    return out


def run_costs(samples: Mapping[str, Sequence[Mapping[str, Any]]],
              results: Mapping[str, Sequence[Row]]) -> dict[tuple[str, int], Cost]:
    """(strategy, N) -> cost per item for every (strategy, N) of the store's ``results``
    (item -> its rows; ``samples``: item -> its samples' dicts with ``tokens``): the mean over
    the items that have the (strategy, N) of :func:`item_costs`."""
    per_key: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for item, rows in results.items():
        tokens = [s["tokens"] for s in samples.get(item, ())]
        for key, cost in item_costs(rows, tokens).items():
            per_key.setdefault(key, []).append(cost)
    return {key: {"tokens": mean_known([c[0] for c in costs]),
                  "flops": mean_known([c[1] for c in costs])}
            for key, costs in sorted(per_key.items())}


def mean_known(values: Sequence[float]) -> float | None:
    """The mean of ``values``; None when there are none or any is not a finite number."""
    if not values or any(not math.isfinite(v) for v in values):
        return None
    return math.fsum(values) / len(values)
