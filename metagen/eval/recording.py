"""Run one item away from the store: the item's prior samples and scores in, the store writes out.

A worker of a scale-out run never opens the run's SQLite store (one writer: the driver).
:class:`RecordingStore` stands in for it: it answers ``samples`` / ``scores`` from what the driver
read before handing the item out, and records every ``save_item`` call, which the driver then
replays, in order, into the real store (:func:`replay`). The item's computation is the runner's
own (``run_item``), so a recorded item is stored exactly as a local run would store it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from metagen.eval.store import StoredSample

SaveCall = tuple[tuple[Any, ...], dict[str, Any]]  # (args, kwargs) of one save_item call


class ItemSink(Protocol):
    """What ``replay`` writes into: the run's store."""

    def save_item(self, item_id: str, samples: Sequence[StoredSample], *args: Any,
                  **kwargs: Any) -> None: ...


@dataclass(slots=True)
class RecordingStore:
    """The store methods the runner's per-item functions use, over one item's prior state."""

    prior_samples: Mapping[int, StoredSample]
    prior_scores: Mapping[str, Mapping[int, float]]
    calls: list[SaveCall] = field(default_factory=list)

    def samples(self, item_id: str) -> dict[int, StoredSample]:
        return dict(self.prior_samples)

    def scores(self, item_id: str, scorer: str) -> dict[int, float]:
        return dict(self.prior_scores.get(scorer, {}))

    def save_item(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((args, kwargs))


def replay(calls: Sequence[SaveCall], store: ItemSink) -> None:
    """Write the recorded ``save_item`` calls into ``store``, in the order they were made."""
    for args, kwargs in calls:
        store.save_item(*args, **kwargs)
