"""What the difficulty tables and the compute-optimal choice read of a run: its per-item result
rows and, per item, its difficulty label, pass@1, mean reward score and generated tokens.

Generated tokens of an item for (strategy, N): the trace's usage where the strategy ran at that
N itself (the step searches), else N times the mean tokens of the item's stored samples (a
strategy derived from N of them spends, in expectation over the subsets, N samples' tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

Row = tuple[str, str, int, str, float]  # (item, strategy, n, metric, value)
REWARD = "reward"  # the scorer name of the reward model's scores in the store


class RunView(Protocol):
    """The store queries read here (:class:`~metagen.eval.store.RunStore` has them)."""

    def results(self) -> list[Row]: ...

    def difficulties(self) -> dict[str, str | None]: ...

    def sample_summary(self) -> dict[str, tuple[int, int, int]]: ...

    def mean_scores(self, scorer: str) -> dict[str, float]: ...

    def traced_tokens(self) -> dict[tuple[str, str, int], int]: ...


@dataclass(slots=True, frozen=True)
class RunRows:
    """A run's done items, as rows and per-item maps (each keyed by item id; an item is
    absent from ``pass1`` / ``mean_score`` when it has no stored samples / scores)."""

    rows: tuple[Row, ...]
    labels: Mapping[str, str | None]
    pass1: Mapping[str, float]
    mean_score: Mapping[str, float]
    tokens: Mapping[tuple[str, str, int], float]  # (item, strategy, n) -> generated tokens

    @property
    def items(self) -> list[str]:
        """The items, sorted."""
        return sorted(self.labels)


def read_run_rows(store: RunView, items: Sequence[str] | None = None) -> RunRows:
    """The :class:`RunRows` of ``store``'s done items (only those in ``items`` when given)."""
    keep = set(store.difficulties()) if items is None else set(items)
    rows = tuple(r for r in store.results() if r[0] in keep)
    summary = {i: s for i, s in store.sample_summary().items() if i in keep and s[0] > 0}
    traced = store.traced_tokens()
    tokens: dict[tuple[str, str, int], float] = {}
    for item, strategy, n, _, _ in rows:
        key = (item, strategy, n)
        if key in traced:
            tokens[key] = float(traced[key])
        elif item in summary:
            tokens[key] = n * summary[item][2] / summary[item][0]
    return RunRows(rows, {i: d for i, d in store.difficulties().items() if i in keep},
                   {i: c / m for i, (m, c, _) in summary.items()},
                   {i: v for i, v in store.mean_scores(REWARD).items() if i in keep}, tokens)
