"""The resumable runner: one or several strategies over one task's items, sampled once at the
largest N.

For each item not yet done: ONE ``generate`` call for ``max(ns)`` samples with the item's seed
(:func:`~metagen.eval.seeds.item_seed`; sample j is then a pure function of (run seed, item id,
j)), shared by every subsampled strategy of the run (the registry's ``subsampled`` family:
:mod:`metagen.eval.catalog`);
failed or empty samples logged by reason and retried (``attempts`` per session, and again on
resume); each scorer those strategies read (the reward model, the policy's confidence) scoring
every sample once; the per-N metrics (:mod:`metagen.eval.metrics`) and costs
(:mod:`metagen.eval.cost`). ``greedy`` (:mod:`metagen.eval.greedy`) and the registry's other
strategies (searches, adaptive and refinement ones: :mod:`metagen.eval.direct`) run on their
own, at each N, each its own seeded run.
An item's results, scores and done mark are stored in one transaction (its samples as they are
drawn). Items run ``concurrency`` at a time in threads
(:mod:`metagen.eval.threads`) or on a pool's workers; only the calling thread writes the store.
The output folder is checked and locked and the run key claimed before any model is loaded.
``results.json`` is rewritten atomically at the end, with status ``complete`` (every item
done) or ``partial`` (items failed and will be retried by a rerun, or a signal or an error
stopped the run). Items are keyed by id, never by position or worker (L6).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from metagen.errors import InvalidParameterError
from metagen.eval.atomic import write_json_atomic
from metagen.eval.backends import Backends, Loader, check_loaders, load_backends
from metagen.eval.breakdown import difficulty_tables
from metagen.eval.catalog import GREEDY, is_subsampled
from metagen.eval.config import PRM, EvalConfig, parse_strategies
from metagen.eval.cost import own_generated_tokens
from metagen.eval.direct import check_feedback
from metagen.eval.interrupt import RunInterrupted, raising_on_signals
from metagen.eval.item import Finished, WorkUnit, run_item
from metagen.eval.metrics import summarize
from metagen.eval.preflight import check_output_dir
from metagen.eval.provenance import hardware, versions
from metagen.eval.recording import replay
from metagen.eval.runrows import REWARD, read_run_rows
from metagen.eval.runkey import run_key
from metagen.eval.runlock import run_folder_lock
from metagen.eval.selectors import CONFIDENCE
from metagen.eval.store import RunStore
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.eval.threads import ThreadPool, thread_safe
from metagen.eval.writefail import folder_writes

# the names the runner's callers have always imported from here
__all__ = ["CONFIDENCE", "PRM", "RESULTS_NAME", "REWARD", "STORE_NAME", "Backends", "EvalConfig",
           "Finished", "ItemPool", "Loader", "Progress", "WorkUnit", "check_loaders",
           "load_backends", "parse_strategies", "run_eval", "run_item"]

STORE_NAME = "run.sqlite"
RESULTS_NAME = "results.json"
Progress = Callable[[int, int], None]  # (items finished this session, items to do)


class ItemPool(Protocol):
    """Does items elsewhere: ``run`` yields one :data:`Finished` per unit, in any order, each
    item exactly once (a unit whose worker died is redone, never dropped)."""

    def run(self, config: EvalConfig, units: Sequence[WorkUnit]) -> Iterator[Finished]: ...


def run_eval(config: EvalConfig, task: TaskSpec, out: str | Path, *,
             load_generator: Callable[[], Any], load_reward: Loader | None = None,
             load_prm: Loader | None = None, load_confidence: Loader | None = None,
             force_resume: bool = False, progress: Progress | None = None,
             pool: ItemPool | None = None, concurrency: int = 1) -> tuple[dict[str, Any], int]:
    """Run (or resume) ``config`` into folder ``out``; returns (the results.json object, exit
    status: 0 complete, 1 items failed, 130/143 interrupted by SIGINT/SIGTERM).

    Before any model is loaded: the folder is checked (writable, space) and locked for the
    run (:mod:`~metagen.eval.runlock`: a folder another process is running into raises
    :class:`~metagen.errors.RunFolderBusyError` naming ``out``), the task's ``preflight`` run
    (code tasks: opt-in and sandbox), the items are read and the store's run key compared (a
    different key raises ``InvalidParameterError`` naming ``run_key`` unless
    ``force_resume``). A write to the folder that fails later (disk full, quota, read-only or
    failing disk) raises :class:`~metagen.errors.RunFolderWriteError` naming the file; the
    items committed before it stay, and a rerun resumes. ``load_generator()`` and the scorers
    the strategies need (``load_reward()`` for best_of_n / weighted_vote,
    ``load_confidence()`` for their ``_confidence`` variants, ``load_prm()`` for the step
    searches: what the strategies' specs need, :attr:`EvalConfig.scorers_needed`) are called
    only when an item remains to be done; a strategy needing feedback on a task without any
    raises ``InvalidParameterError`` naming ``strategy`` before that. ``task`` is the
    registry's: the run puts it in ``config``'s prompt form (text or chat) and thinking
    (:meth:`EvalConfig.formed`).

    ``concurrency`` > 1 does that many items at once in threads over the one generator (when
    it declares it may be called from several threads:
    :attr:`~metagen.generators.base.Capabilities.thread_safe`); each
    item's results do not depend on it. A run with a strategy run at each N (a search, an
    adaptive or refinement strategy) does one item at a time: it measures its usage (and
    budget) as the generator's usage before and after, which concurrent items would mix. With a ``pool`` (e.g.
    :class:`~metagen.eval.ray_runner.RayPool`) the items are done by its workers, each with its
    own backend. Either way this thread alone writes the store: it hands each item out with its
    stored samples and scores and replays the worker's recorded writes."""
    loaders = {REWARD: load_reward, PRM: load_prm, CONFIDENCE: load_confidence}
    task = config.formed(task)  # the run's prompt form and thinking (refused before any work)
    check_loaders(config, loaders)
    check_feedback(config.strategies, task)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        raise InvalidParameterError("concurrency", concurrency, "must be a positive integer")
    folder = check_output_dir(out)
    with run_folder_lock(folder), folder_writes(folder / STORE_NAME, (sqlite3.Error,)):
        return _run_locked(config, task, folder, loaders, force_resume=force_resume,
                           progress=progress, pool=pool, concurrency=concurrency,
                           load_generator=load_generator)


def _run_locked(config: EvalConfig, task: TaskSpec, folder: Path,
                loaders: Mapping[str, Loader | None], *, load_generator: Callable[[], Any],
                force_resume: bool, progress: Progress | None, pool: ItemPool | None,
                concurrency: int) -> tuple[dict[str, Any], int]:
    """:func:`run_eval` once the folder is checked and locked."""
    task.preflight()
    items = task.items(config.data, config.limit)
    fields = config.key_fields(task)
    key = run_key(fields)
    started = time.time()
    with RunStore(folder / STORE_NAME) as store:
        store.claim(key, fields, force=force_resume)
        store.begin_session(key, started)
        done = store.done_items()
        todo = [it for it in items if it.id not in done]
        failed: list[str] = []
        status, code = "partial", 1
        try:
            with raising_on_signals():
                if todo and pool is None:
                    backends = load_backends(config, load_generator(), loaders)
                    workers = concurrency if thread_safe(backends.generator) and all(
                        s == GREEDY or is_subsampled(s) for s in config.strategies) else 1
                    pool = ThreadPool(task, backends, workers) if workers > 1 else None
                    store.note_backend(type(backends.generator).__name__)
                    for i, item in enumerate(todo if pool is None else ()):
                        if not run_item(config, task, item, backends, store):
                            failed.append(item.id)
                        if progress:
                            progress(i + 1, len(todo))
                if todo and pool is not None:
                    names = sorted(config.scorers_needed - {PRM})
                    units = [(it, store.samples(it.id),
                              {name: store.scores(it.id, name) for name in names})
                             for it in todo]
                    for i, (item_id, ok, calls, backend) in enumerate(pool.run(config, units)):
                        store.note_backend(backend)
                        replay(calls, store)
                        if not ok:
                            failed.append(item_id)
                        if progress:
                            progress(i + 1, len(todo))
                status, code = ("partial", 1) if failed else ("complete", 0)
        except RunInterrupted as exc:
            code = 128 + exc.signum
        finally:
            ended = time.time()
            store.end_session(ended, status)
            report = _report(config, fields, key, store, items, failed, status,
                             started, ended, len(items) - len(todo))
            with folder_writes(folder / RESULTS_NAME, (OSError,)):
                write_json_atomic(folder / RESULTS_NAME, report)
    return report, code


def _report(config: EvalConfig, fields: Mapping[str, Any], key: str, store: RunStore,
            items: Sequence[EvalItem], failed: Sequence[str], status: str, started: float,
            ended: float, resumed: int) -> dict[str, Any]:
    """The results.json object (L13, L14): only the ``times`` section differs between an
    interrupted-and-resumed run and an uninterrupted one."""
    ids = {it.id for it in items}
    done = len(store.done_items() & ids)
    rows = [r for r in store.results() if r[0] in ids]
    return {
        "status": status, "run_key": key, "config": {**fields, "limit": config.limit},
        "provenance": {"versions": versions(), "hardware": hardware(), "model": dict(config.model),
                       "backends": store.backends(),
                       "seeds": {"run": config.seed, "per_item": "sha256(run seed, item id); "
                                 "sample j = sample j of one generate call with that seed",
                                 "direct": "sha256(run seed, item id, N) per N"},
                       "executor": dict(fields["executor_limits"]) or None},
        "accounting": {"n_items_total": len(items), "done": done, "failed": len(failed),
                       "skipped": len(items) - done - len(failed)},
        "failures_by_reason": store.failure_counts(), "failed_items": sorted(failed),
        "generated_tokens": store.token_count() + own_generated_tokens(
            rows, [s for s in config.strategies if is_subsampled(s)]),
        "results": summarize(rows),
        **difficulty_tables(read_run_rows(store, sorted(ids))),
        "times": {"started_at": store.first_started_at(), "session_started_at": started,
                  "ended_at": ended, "sessions": store.sessions(), "resumed_items": resumed},
    }

