"""Wall time of one item's strategies at each N, as the runner measures it: seconds of the
monotonic clock, stored in the trace of each of the item's result rows under :data:`SECONDS`,
with the wall-clock time its work began under :data:`STARTED` (in the one transaction that stores the item, so a resumed run keeps its earlier items' times;
``results.json``'s summary rows carry no time, so they stay the same for a resumed run).

What the seconds cover:

- a strategy run at each N (``greedy``, the searches, adaptive and refinement strategies): that
  run, from its call to its result (grading excluded);
- a subsampled strategy (and the samples' ``pass@k``): the item's ONE batch of ``max(ns)``
  samples, plus the scoring of that batch by the scorer the strategy reads; the same at every
  N, since every N is taken from that one batch (at N < max N it is the time of the batch the
  run drew, not of a run drawing only N). The choice among size-N subsets is the eval's
  estimator, not the strategy's work, and is not timed. A batch drawn over several sessions
  (failed samples retried on resume) counts only the session that finished the item.

Items run concurrently (``--concurrency``) are timed as they ran, sharing the machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from metagen.eval.store import ItemResult

SECONDS = "seconds"  # the trace key of a result's wall time
STARTED = "started_at"  # the trace key of when its work began (seconds since the epoch)


@dataclass(slots=True)
class Stopwatch:
    """Seconds spent inside ``with watch:`` blocks, summed (``elapsed``, monotonic clock), and
    the wall-clock time the first block began (``started``, None before)."""

    elapsed: float = 0.0
    started: float | None = None
    _start: float = field(default=0.0, repr=False)

    def __enter__(self) -> Stopwatch:
        if self.started is None:
            self.started = time.time()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed += time.perf_counter() - self._start


def timed(seconds: float, started: float | None) -> dict[str, float]:
    """The trace entries of a result whose work began at ``started`` and took ``seconds``."""
    return {SECONDS: float(seconds), **({} if started is None else {STARTED: float(started)})}


def untimed(trace: Mapping[str, Any]) -> dict[str, Any]:
    """``trace`` without its time entries: what two runs of the same seeded item share."""
    return {k: v for k, v in trace.items() if k not in (SECONDS, STARTED)}


def with_seconds(results: Sequence[ItemResult],
                 seconds: Callable[[ItemResult], float | None],
                 started: float | None = None) -> list[ItemResult]:
    """``results`` with ``seconds(result)`` in each trace under :data:`SECONDS` and ``started``
    under :data:`STARTED` (a result for which ``seconds`` gives None is kept as it is)."""
    out = []
    for r in results:
        s = seconds(r)
        out.append(r if s is None else replace(r, trace={**r.trace, **timed(s, started)}))
    return out
