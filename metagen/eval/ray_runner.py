"""Scale-out on Ray (the optional extra ``pip install 'metagen[ray]'``): items over K workers.

:class:`RayPool` is an :class:`~metagen.eval.runner.ItemPool`: one Ray actor per worker, each
building its own backend with ``load_generator(worker index)`` (a local model, or its share of an
OpenAI-compatible server fleet) and its own scorer. The driver keeps a work queue (never fixed
ranks, so a rerun with another worker count resumes the same store, L6) and at most one item in
flight per worker; a worker returns the item's recorded store writes
(:mod:`metagen.eval.recording`) and only the driver writes the store. Worker death is handled by
the driver's own requeue (actors run with ``max_restarts=0``): the dead worker's in-flight item
goes back to the queue and a fresh actor takes the worker's place, at most ``max_replacements``
times in all, after which a ``BackendError`` stops the run (the store keeps every finished item;
a rerun resumes). An item is stored only from a finished result, whole, so nothing is lost or
written twice. Samples do not depend on the worker: each item's seed is a function of the run
seed and the item id.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from metagen.errors import BackendError, InvalidParameterError
from metagen.eval.recording import RecordingStore
from metagen.eval.backends import load_backends
from metagen.eval.config import PRM, EvalConfig
from metagen.eval.item import Finished, WorkUnit, run_item
from metagen.eval.runrows import REWARD
from metagen.eval.selectors import CONFIDENCE

RAY_MISSING = "Ray is not installed: pip install 'metagen[ray]'"


def import_ray() -> Any:
    """The ``ray`` module; ``BackendError`` naming the extra when it is not installed."""
    try:
        import ray
    except ImportError:
        raise BackendError(RAY_MISSING) from None
    return ray


class _Worker:
    """One worker: its backend and scorer, built once; does one item per call."""

    def __init__(self, index: int, load_generator: Callable[[int], Any],
                 load_reward: Callable[[], Any] | None,
                 load_prm: Callable[[], Any] | None, config: EvalConfig,
                 load_confidence: Callable[[], Any] | None = None) -> None:
        from metagen.eval.tasks import get_task

        self.config, self.task = config, config.formed(get_task(config.task))
        self.backends = load_backends(config, load_generator(index), {
            REWARD: load_reward, PRM: load_prm, CONFIDENCE: load_confidence})

    def pid(self) -> int:
        return os.getpid()

    def run(self, unit: WorkUnit) -> Finished:
        item, samples, scores = unit
        store = RecordingStore(samples, scores)
        ok = run_item(self.config, self.task, item, self.backends, store)
        return item.id, ok, store.calls, type(self.backends.generator).__name__


class RayPool:
    """``workers`` Ray actors over the Ray already initialised in this process (see
    :func:`ray_session`). ``actors`` lists the live ones (tests kill them to check requeue);
    ``replaced`` counts the workers that died and were replaced."""

    def __init__(self, workers: int, load_generator: Callable[[int], Any], *,
                 load_reward: Callable[[], Any] | None = None,
                 load_prm: Callable[[], Any] | None = None,
                 load_confidence: Callable[[], Any] | None = None,
                 max_replacements: int | None = None) -> None:
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise InvalidParameterError("ray_workers", workers, "must be a positive integer")
        self.workers, self.load_generator = workers, load_generator
        self.load_reward, self.load_prm = load_reward, load_prm
        self.load_confidence = load_confidence
        self.max_replacements = 2 * workers if max_replacements is None else max_replacements
        self.actors: list[Any] = []
        self.replaced = 0  # workers replaced after dying, in the last run

    def _start(self, ray: Any, index: int, config: EvalConfig) -> Any:
        actor_cls = ray.remote(num_cpus=1, max_restarts=0)(_Worker)
        return actor_cls.remote(index, self.load_generator, self.load_reward, self.load_prm,
                                config, self.load_confidence)

    def run(self, config: EvalConfig, units: Sequence[WorkUnit]) -> Iterator[Finished]:
        """Each unit's result once, as workers finish them; a unit whose worker died is
        requeued and redone by a replacement worker."""
        ray = import_ray()
        queue: deque[WorkUnit] = deque(units)
        self.actors = [self._start(ray, i, config) for i in range(min(self.workers, len(queue)))]
        flight: dict[Any, tuple[int, WorkUnit]] = {}
        self.replaced = 0
        try:
            while queue or flight:
                busy = {slot for slot, _ in flight.values()}
                for slot in range(len(self.actors)):
                    if queue and slot not in busy:
                        unit = queue.popleft()
                        flight[self.actors[slot].run.remote(unit)] = (slot, unit)
                ready, _ = ray.wait(list(flight), num_returns=1)
                slot, unit = flight.pop(ready[0])
                try:
                    finished: Finished = ray.get(ready[0])
                except ray.exceptions.RayActorError as exc:
                    self.replaced += 1
                    if self.replaced > self.max_replacements:
                        raise BackendError(f"Ray workers died {self.replaced} times; last: "
                                           f"{exc}") from exc
                    queue.appendleft(unit)
                    self.actors[slot] = self._start(ray, slot, config)
                    continue
                yield finished
        finally:
            for actor in self.actors:
                ray.kill(actor)
            self.actors = []


class ray_session:
    """Context manager: ``ray.init(address=...)`` when an address is given (an existing cluster,
    left running), else a local Ray with ``num_cpus=workers`` that is shut down on exit."""

    def __init__(self, address: str | None, workers: int) -> None:
        self.address, self.workers = address, workers

    def __enter__(self) -> Any:
        ray = import_ray()
        env = {"env_vars": {"PYTHONPATH": os.pathsep.join(
            p for p in [_package_root(), os.environ.get("PYTHONPATH", "")] if p)}}
        if self.address is None:
            ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                     runtime_env=env)
        else:
            ray.init(address=self.address, log_to_driver=False)
        return ray

    def __exit__(self, *exc: object) -> None:
        import_ray().shutdown()


def _package_root() -> str:
    """The folder holding this ``metagen`` package, so local workers import the same code."""
    import metagen

    return os.path.dirname(os.path.dirname(os.path.abspath(metagen.__file__)))
