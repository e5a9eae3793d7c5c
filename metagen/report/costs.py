"""Compute per item at each (strategy, N), for the accuracy-against-compute curves (pure).

- Strategies derived by subsampling ONE set of ``n_max`` samples: a size-N subset costs the
  generated tokens of its N samples, so the mean over items of ``N x`` (the item's mean tokens
  per sample) is the expected cost of the strategy at N. Their FLOPs are not in the store
  (``None``: not recorded).
- Strategies run directly at each N (the step searches): the mean over items of the run's own
  ``usage`` (generated tokens; generator plus scorer FLOPs, ``None`` when any is unknown).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Cost = dict[str, float | None]  # {"tokens": ..., "flops": ...}, None when not recorded


def subsampled_tokens(sample_tokens: Mapping[str, Sequence[int]], n: int) -> float | None:
    """Expected generated tokens of a size-``n`` subset, averaged over items (``None`` when no
    item has samples)."""
    per_item = [sum(t) / len(t) for t in sample_tokens.values() if t]
    return n * sum(per_item) / len(per_item) if per_item else None


def usage_cost(usages: Iterable[Mapping[str, Any]]) -> Cost:
    """Mean generated tokens and mean FLOPs (generator + scorer) over the items' ``usage``
    dicts; FLOPs ``None`` when any item's are missing or not finite."""
    usages = list(usages)
    if not usages:
        return {"tokens": None, "flops": None}
    tokens = [u.get("generated_tokens") for u in usages]
    flops = [_flops(u) for u in usages]
    return {"tokens": _mean(tokens), "flops": _mean(flops)}


def _flops(usage: Mapping[str, Any]) -> float | None:
    parts = [usage.get("generator_flops"), usage.get("scorer_flops")]
    if any(not isinstance(p, (int, float)) or not math.isfinite(p) for p in parts):
        return None
    return float(sum(parts))  # type: ignore[arg-type]


def _mean(values: Sequence[Any]) -> float | None:
    if not values or any(not isinstance(v, (int, float)) or not math.isfinite(v)
                         for v in values):
        return None
    return float(sum(values)) / len(values)


def run_costs(samples: Mapping[str, Sequence[Mapping[str, Any]]],
              results: Mapping[str, Sequence[tuple[str, int, str, float, Any]]]
              ) -> dict[tuple[str, int], Cost]:
    """(strategy, N) -> cost per item for every (strategy, N) of the store's ``results``: from
    the traces' ``usage`` where the strategy records one, else from the sample tokens."""
    tokens = {item: [s["tokens"] for s in rows] for item, rows in samples.items()}
    usages: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    keys: set[tuple[str, int]] = set()
    for rows in results.values():
        for strategy, n, _, _, trace in rows:
            keys.add((strategy, n))
            if isinstance(trace, Mapping) and isinstance(trace.get("usage"), Mapping):
                usages.setdefault((strategy, n), []).append(trace["usage"])
    out: dict[tuple[str, int], Cost] = {}
    for key in sorted(keys):
        if key in usages:
            out[key] = usage_cost(usages[key])
        else:
            out[key] = {"tokens": subsampled_tokens(tokens, key[1]), "flops": None}
    return out
