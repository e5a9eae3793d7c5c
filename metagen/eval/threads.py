"""Items in threads over one backend: an :class:`~metagen.eval.runner.ItemPool` for one process.

A generator that declares itself thread-safe
(:attr:`~metagen.generators.base.Capabilities.thread_safe`: the engine's
:class:`~metagen.generators.local.LocalGenerator`, whose outputs do not depend on what they are
batched with; an :class:`~metagen.generators.openai.OpenAIGenerator`, whose server batches them)
does ``workers`` items at once. Each worker thread computes its item with the runner's own
``run_item`` against a :class:`~metagen.eval.recording.RecordingStore`; the thread that iterates
:meth:`ThreadPool.run` (the runner's) replays those writes, so it alone writes the store and an
item is stored exactly as a sequential run stores it. Samples and scores do not depend on the
schedule: each item's seed is a function of the run seed and the item id.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from metagen.errors import BackendError, InvalidParameterError
from metagen.eval.backends import Backends
from metagen.eval.config import EvalConfig
from metagen.eval.item import Finished, WorkUnit, run_item
from metagen.eval.recording import RecordingStore
from metagen.eval.tasks import TaskSpec
from metagen.generators.base import Capabilities


def thread_safe(generator: Any) -> bool:
    """Whether ``generator`` may be called from several threads at once: its
    :attr:`~metagen.generators.base.Capabilities.thread_safe`. False for an object that declares
    no capabilities, and for a server that cannot be reached to say (its capabilities raise a
    ``BackendError``): its items then fail one at a time, as they would in threads."""
    try:
        caps = getattr(generator, "capabilities", None)
    except BackendError:
        return False
    return isinstance(caps, Capabilities) and caps.thread_safe


class ThreadPool:
    """Up to ``workers`` items in flight at once over ``backends``."""

    def __init__(self, task: TaskSpec, backends: Backends, workers: int) -> None:
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise InvalidParameterError("concurrency", workers, "must be a positive integer")
        self.task, self.backends, self.workers = task, backends, workers

    def _one(self, config: EvalConfig, unit: WorkUnit) -> Finished:
        item, samples, scores = unit
        store = RecordingStore(samples, scores)
        ok = run_item(config, self.task, item, self.backends, store)
        return item.id, ok, store.calls, type(self.backends.generator).__name__

    def run(self, config: EvalConfig, units: Sequence[WorkUnit]) -> Iterator[Finished]:
        """Each unit's result once, as its thread finishes it; at most ``workers`` in flight
        (later units are submitted as earlier ones finish, so an interrupted run leaves no
        queue behind). An error in an item is raised here, after the finished ones."""
        pending = list(reversed(units))
        executor = ThreadPoolExecutor(self.workers, thread_name_prefix="metagen-eval")
        flight: set[Future[Finished]] = set()
        try:
            while pending or flight:
                while pending and len(flight) < self.workers:
                    flight.add(executor.submit(self._one, config, pending.pop()))
                done, flight = wait(flight, return_when=FIRST_COMPLETED)
                for future in done:
                    yield future.result()
        finally:
            executor.shutdown(wait=False, cancel_futures=True)
