"""Difficulty bins for items (pure functions), after Snell et al. 2024, "Scaling LLM Test-Time
Compute Optimally can be More Effective than Scaling Model Parameters" (section 3.2).

Three sources, each a :class:`Binning` whose bins are ordered easiest first:

- ``task``: the task's own label per item (testbed: its number of reasoning steps ``d3``;
  MATH-500: ``level 4``). Bins are the distinct labels, ordered by the number in them when every
  label holds one, else alphabetically. Unbiased: fixed before anything is sampled.
- ``oracle``: quantile bins (5 by default) of the base model's pass@1 on the item (the fraction
  of its stored samples graded correct), Snell's "oracle difficulty". It reads the grades, so it
  cannot bin a new unlabelled item, and a policy fitted and scored on these bins is optimistic:
  the bin of a held-out item already carries that item's correctness (from the same samples the
  strategies select among).
- ``predicted``: the same quantile bins over the mean reward-model (verifier) score of the
  item's samples, Snell's "model-predicted difficulty". It needs no grades, so it bins new items
  (sample, score, bin); it is noisier than ``oracle``, and biased to the extent that the verifier
  mis-scores whole items.

Quantile bins have thresholds ``t_1 >= ... >= t_(k-1)``, the values at ranks
``floor(i * m / k)`` of the ``m`` fitted values sorted from easiest (highest) to hardest, and a
value ``v`` falls in bin ``1 + #{i : v <= t_i}``: a function of the value alone, so equal values
always share a bin (with many ties some of the ``k`` bins stay empty) and a new value is binned
by the fitted thresholds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.errors import InvalidParameterError

Source = Literal["task", "oracle", "predicted"]
SOURCES: tuple[Source, ...] = ("task", "oracle", "predicted")
DEFAULT_BINS = 5
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(slots=True, frozen=True)
class Binning:
    """How items map to bins. ``order``: the bin labels, easiest first. ``thresholds``: for the
    quantile sources, ``t_1 >= ... >= t_(k-1)`` (empty for ``task``)."""

    source: Source
    order: tuple[str, ...]
    thresholds: tuple[float, ...] = ()

    def bin_of(self, key: str | float) -> str:
        """The bin of a task label (``task``) or of a pass@1 / mean score (quantile sources).
        A task label outside ``order`` is its own bin (a policy falls back on it)."""
        if self.source == "task":
            return str(key)
        value = float(key)
        if math.isnan(value):
            raise InvalidParameterError("difficulty", value, "must not be NaN")
        return str(1 + sum(value <= t for t in self.thresholds))

    def to_dict(self, counts: Mapping[str, int] | None = None) -> dict[str, Any]:
        """JSON-able definition: source, bins (easiest first), thresholds, items per bin."""
        out: dict[str, Any] = {"source": self.source, "bins": list(self.order),
                               "thresholds": list(self.thresholds) or None}
        if counts is not None:
            out["items"] = {b: int(counts.get(b, 0)) for b in self.order}
        return out


def label_order(labels: Iterable[str]) -> list[str]:
    """Distinct labels, ordered by the first number in each when every label holds one
    (``d2`` before ``d10``), else alphabetically."""
    distinct = sorted(set(labels))
    numbers = {x: _first_number(x) for x in distinct}
    if any(v is None for v in numbers.values()):
        return distinct
    return sorted(distinct, key=lambda x: (numbers[x] or 0.0, x))


def _first_number(label: str) -> float | None:
    found = _NUMBER.search(label)
    return None if found is None else float(found.group())


def task_binning(labels: Iterable[str]) -> Binning:
    """Bins given by the task: one per distinct label, in :func:`label_order`."""
    return Binning("task", tuple(label_order(labels)))


def quantile_binning(values: Sequence[float], source: Source, k: int = DEFAULT_BINS) -> Binning:
    """``k`` quantile bins of ``values`` (higher = easier: pass@1 or mean score), labelled
    ``"1"`` (easiest) to ``str(k)``. Raises ``InvalidParameterError`` naming ``bins`` for
    ``k < 1`` and ``difficulty`` for no or NaN values."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidParameterError("bins", k, "must be a positive integer")
    if not values or any(math.isnan(v) for v in values):
        raise InvalidParameterError("difficulty", source, "needs one finite value per item")
    ranked = sorted(values, reverse=True)
    m = len(ranked)
    thresholds = tuple(ranked[min(m - 1, i * m // k)] for i in range(1, k))
    return Binning(source, tuple(str(b) for b in range(1, k + 1)), thresholds)


def choose_binning(items: Sequence[str], labels: Mapping[str, str | None],
                   pass1: Mapping[str, float], mean_score: Mapping[str, float],
                   source: Source | Literal["auto"] = "auto",
                   k: int = DEFAULT_BINS) -> tuple[Binning, dict[str, str]]:
    """(binning, item -> bin) for ``items``. ``auto``: the task's labels when every item has
    one, else ``oracle`` when every item has a pass@1, else ``predicted`` when every item has a
    mean score. A source that lacks a value for some item raises ``InvalidParameterError``
    naming ``difficulty``."""
    if source == "auto":
        have = {"task": labels, "oracle": pass1, "predicted": mean_score}
        found = [s for s in SOURCES if all(have[s].get(i) is not None for i in items)]
        if not found:
            raise InvalidParameterError("difficulty", "auto", "the items have no task label, "
                                        "no samples and no scores to bin them by")
        source = found[0]
    if source not in SOURCES:
        raise InvalidParameterError("difficulty", source, f"must be auto or one of {SOURCES}")
    table: Mapping[str, Any] = {"task": labels, "oracle": pass1, "predicted": mean_score}[source]
    missing = [i for i in items if table.get(i) is None]
    if missing:
        raise InvalidParameterError("difficulty", source, f"{len(missing)} item(s) have no "
                                    f"{source} difficulty (e.g. {missing[0]!r})")
    keys = [table[i] for i in items]
    binning = (task_binning(keys) if source == "task"
               else quantile_binning([float(v) for v in keys], source, k))
    return binning, {i: binning.bin_of(v) for i, v in zip(items, keys)}
