"""The resumable runner: one or several strategies over one task's items, sampled once at the
largest N.

For each item not yet done: ONE ``generate`` call for ``max(ns)`` samples with the item's seed
(:func:`~metagen.eval.seeds.item_seed`; sample j is then a pure function of (run seed, item id,
j)), shared by every subsampled strategy of the run (:data:`~metagen.eval.selectors.SUBSAMPLED`);
failed or empty samples logged by reason and retried (``attempts`` per session, and again on
resume); each scorer those strategies read (the reward model, the policy's confidence) scoring
every sample once; the per-N metrics (:mod:`metagen.eval.metrics`) and costs
(:mod:`metagen.eval.cost`). ``greedy`` (:mod:`metagen.eval.greedy`) and the step searches
(:data:`~metagen.eval.direct.DIRECT`) and the adaptive strategies
(:data:`~metagen.eval.adaptive.ADAPTIVE`) run on their own, at each N, each its own seeded run.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from metagen.errors import BackendError, InvalidParameterError, InvalidPromptError
from metagen.eval.adaptive import ADAPTIVE, adaptive_item
from metagen.eval.atomic import write_json_atomic
from metagen.eval.breakdown import difficulty_tables
from metagen.eval.cost import CostModel, cost_model_for, cost_results, own_generated_tokens
from metagen.eval.direct import DIRECT, direct_item
from metagen.eval.greedy import GREEDY, greedy_item
from metagen.eval.interrupt import RunInterrupted, raising_on_signals
from metagen.eval.metrics import item_results, summarize
from metagen.eval.preflight import check_output_dir
from metagen.eval.provenance import hardware, versions
from metagen.eval.recording import SaveCall, replay
from metagen.eval.runrows import REWARD, read_run_rows
from metagen.eval.runkey import run_key
from metagen.eval.runlock import run_folder_lock
from metagen.eval.seeds import item_seed
from metagen.eval.selectors import CONFIDENCE, SUBSAMPLED, StoredReward, make_selector
from metagen.eval.store import ItemResult, RunStore, StoredSample
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.eval.writefail import folder_writes
from metagen.scorers.callables import as_reward, check_scores
from metagen.strategies.parallel import check_counts, failure_reason
from metagen.types import Completion, SamplingParams

STORE_NAME = "run.sqlite"
RESULTS_NAME = "results.json"
PRM = "prm"  # the process reward model's name among the run's scorers (never stored)
Progress = Callable[[int, int], None]  # (items finished this session, items to do)
WorkUnit = tuple[EvalItem, dict[int, StoredSample], dict[str, dict[int, float]]]
Finished = tuple[str, bool, list[SaveCall], str]  # item id, done, its save_item calls, backend
Loader = Callable[[], Any]


class ItemPool(Protocol):
    """Does items elsewhere: ``run`` yields one :data:`Finished` per unit, in any order, each
    item exactly once (a unit whose worker died is redone, never dropped)."""

    def run(self, config: EvalConfig, units: Sequence[WorkUnit]) -> Iterator[Finished]: ...


def parse_strategies(value: str | Sequence[str]) -> tuple[str, ...]:
    """``"a,b"`` or ``("a", "b")`` -> ``("a", "b")`` (blanks dropped); a repeated or unknown
    name, or none, raises ``InvalidParameterError`` naming ``strategy``."""
    names = value.split(",") if isinstance(value, str) else list(value)
    out = tuple(str(x).strip() for x in names if str(x).strip())
    known = [*SUBSAMPLED, *DIRECT, *ADAPTIVE, GREEDY]
    if not out or len(set(out)) != len(out) or any(x not in known for x in out):
        raise InvalidParameterError("strategy", value, "must be distinct names among "
                                    f"{', '.join(known)} in this version")
    return out


@dataclass(slots=True, frozen=True)
class EvalConfig:
    """One evaluation. ``model`` describes the policy for the run key and provenance (a local
    path, or a server's ``base_url`` / ``model`` / ``revision``); ``sampling`` holds every
    sampling parameter but ``n`` and ``seed`` (the runner sets those). ``strategy`` is one
    strategy or several (a tuple, or names joined by commas; kept as the comma-joined string):
    the subsampled ones share ONE sample set and its stored scores, the step searches and
    ``greedy`` run on their own. ``strategy_args`` go to every strategy of the run. Validated on
    construction."""

    task: str
    model: Mapping[str, Any]
    strategy: str | tuple[str, ...]
    ns: tuple[int, ...] = (1, 4, 16)
    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=0.8))
    seed: int = 0
    strategy_args: Mapping[str, Any] = field(default_factory=dict)
    reward: str | None = None
    prm: str | None = None
    data: str | None = None
    limit: int | None = None
    max_subsets: int = 32
    attempts: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", ",".join(parse_strategies(self.strategy)))
        if not self.ns or any(not isinstance(n, int) or isinstance(n, bool) or n < 1
                              for n in self.ns) or list(self.ns) != sorted(set(self.ns)):
            raise InvalidParameterError("n", self.ns, "must be increasing positive integers")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise InvalidParameterError("seed", self.seed, "must be a non-negative integer")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InvalidParameterError("limit", self.limit, "must be a positive integer")
        if not isinstance(self.attempts, int) or self.attempts < 1:
            raise InvalidParameterError("attempts", self.attempts, "must be >= 1")
        self.sampling.with_(n=max(self.ns), seed=0)  # n_max must be servable (validates)

    @property
    def strategies(self) -> tuple[str, ...]:
        """The run's strategies, in the order given."""
        return tuple(str(self.strategy).split(","))

    @property
    def scorers_needed(self) -> set[str]:
        """Names of the scorers the strategies read: :data:`REWARD`, :data:`CONFIDENCE`,
        :data:`PRM`."""
        names = {SUBSAMPLED[s] for s in self.strategies if s in SUBSAMPLED}
        return {n for n in names if n} | ({PRM} if set(self.strategies) & set(DIRECT) else set())

    def key_fields(self, task: TaskSpec) -> dict[str, Any]:
        """Everything that changes the outputs (the run key's input; ``strategy`` is the
        comma-joined list); ``limit`` is not in it: items are keyed by id, so a larger limit
        extends a run. Each local model folder (the policy's ``path``, ``reward``, ``prm``)
        also gives its content fingerprint (:func:`~metagen.eval.fingerprint.folder_fingerprint`)
        as ``model_files``, ``reward_files``, ``prm_files``: new weights at the same path make a
        new key. A server's model has none (its name and URL are what the key holds)."""
        from metagen._version import __version__
        from metagen.eval.fingerprint import folder_fingerprint

        sampling = {k: v for k, v in self.sampling.to_dict().items() if k not in ("n", "seed")}
        return {"task": task.name, "data_sha256": task.data_fingerprint(self.data),
                "prompt_template": task.template_fingerprint(), "system_prompt": None,
                "model": dict(self.model), "sampling": sampling, "n_max": max(self.ns),
                "ns": list(self.ns), "seed": self.seed, "strategy": self.strategy,
                "strategy_args": dict(self.strategy_args), "reward": self.reward,
                "prm": self.prm,
                "max_subsets": self.max_subsets, "metagen_version": __version__,
                "executor_limits": dict(task.executor_limits),
                **{f"{role}_files": found for role, folder in (
                    ("model", self.model.get("path")), ("reward", self.reward),
                    ("prm", self.prm)) if (found := folder_fingerprint(folder)) is not None}}


@dataclass(slots=True, frozen=True)
class Backends:
    """What a process does items with: the policy, the scorers by name (:data:`REWARD`,
    :data:`CONFIDENCE`, :data:`PRM`) and their :class:`~metagen.eval.cost.CostModel`."""

    generator: Any
    scorers: Mapping[str, Any] = field(default_factory=dict)
    cost: CostModel = field(default_factory=CostModel)


def load_backends(config: EvalConfig, generator: Any, loaders: Mapping[str, Loader | None]
                  ) -> Backends:
    """The scorers ``config``'s strategies need, each loaded once with ``loaders[name]``
    (the reward model wrapped as a reward), and the cost model of them all."""
    raw = {name: loaders[name]() for name in sorted(config.scorers_needed)  # type: ignore[misc]
           if loaders.get(name)}
    scorers = {k: as_reward(v) if k != PRM else v for k, v in raw.items()}
    return Backends(generator, scorers, cost_model_for(generator, raw))


def check_loaders(config: EvalConfig, loaders: Mapping[str, Loader | None]) -> None:
    """``InvalidParameterError`` naming the flag of a scorer the strategies need and lack."""
    flags = {REWARD: ("reward", "--reward PATH"), PRM: ("prm", "--prm PATH"),
             CONFIDENCE: ("confidence", "a confidence scorer (the policy's LikelihoodVerifier)")}
    for name in sorted(config.scorers_needed):
        if loaders.get(name) is None:
            param, what = flags[name]
            raise InvalidParameterError(param, None, f"{config.strategy} needs {what}")


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
    searches of :data:`~metagen.eval.direct.DIRECT`) are called only when an item remains to
    be done.

    ``concurrency`` > 1 does that many items at once in threads over the one generator (when
    it declares it may be called from several threads:
    :attr:`~metagen.generators.base.Capabilities.thread_safe`); each
    item's results do not depend on it. A run with a step search does one item at a time: a
    search measures its usage (and budget) as the generator's usage before and after, which
    concurrent items would mix. With a ``pool`` (e.g.
    :class:`~metagen.eval.ray_runner.RayPool`) the items are done by its workers, each with its
    own backend. Either way this thread alone writes the store: it hands each item out with its
    stored samples and scores and replays the worker's recorded writes."""
    loaders = {REWARD: load_reward, PRM: load_prm, CONFIDENCE: load_confidence}
    check_loaders(config, loaders)
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
                    from metagen.eval.threads import ThreadPool, thread_safe

                    backends = load_backends(config, load_generator(), loaders)
                    workers = concurrency if thread_safe(backends.generator) and not (
                        set(config.strategies) & (set(DIRECT) | set(ADAPTIVE))) else 1
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


def run_item(config: EvalConfig, task: TaskSpec, item: EvalItem, backends: Backends,
             store: Any) -> bool:
    """Do one item into ``store`` (the run's :class:`RunStore`, or a
    :class:`~metagen.eval.recording.RecordingStore`): the subsampled strategies from its
    samples, then ``greedy`` and each step search; every result, the scores and the done mark
    are stored by ONE final ``save_item`` (the samples as they are drawn). True when done."""
    results: list[ItemResult] = []
    scores: dict[str, dict[int, float]] = {}
    ok = True
    subsampled = [s for s in config.strategies if s in SUBSAMPLED]
    if subsampled:
        got = _run_subsampled(config, task, item, backends, store, subsampled)
        ok = got is not None
        if got is not None:
            results += got[0]
            scores = got[1]
    for strategy in config.strategies:
        if ok and strategy not in SUBSAMPLED:
            direct = _run_direct(config, task, item, backends, store, strategy)
            ok = direct is not None
            results += direct or []
    if ok or results:
        store.save_item(item.id, (), (), scores or None, results, done=ok,
                        difficulty=item.difficulty)
    return ok


def _run_subsampled(config: EvalConfig, task: TaskSpec, item: EvalItem, backends: Backends,
                    store: Any, strategies: Sequence[str]
                    ) -> tuple[list[ItemResult], dict[str, dict[int, float]]] | None:
    """Sample (retrying failed samples up to ``config.attempts`` times), score every sample once
    per scorer the ``strategies`` read, and evaluate them at every N with their costs; None when
    samples are still missing."""
    n_max, seed = max(config.ns), item_seed(config.seed, item.id)
    have = store.samples(item.id)
    for _ in range(config.attempts):
        if len(have) == n_max:
            break
        new, failures = _sample(config, task, item, backends.generator, seed, set(have))
        store.save_item(item.id, new, failures)
        have.update({s.index: s for s in new})
    if len(have) < n_max:
        return None
    samples = [have[j] for j in range(n_max)]
    texts = [s.completion.text for s in samples]
    scores: dict[str, dict[int, float]] = {}
    for name in sorted({x for s in strategies if (x := SUBSAMPLED[s])}):
        values = store.scores(item.id, name)
        if len(values) < n_max:
            scorer = backends.scorers[name]
            got = check_scores(scorer.score([item.prompt] * n_max, texts), n_max,
                               who=type(scorer).__name__)
            values = {j: float(v) for j, v in enumerate(got)}
        scores[name] = values
    stored = {name: StoredReward(texts, [v[j] for j in range(n_max)])
              for name, v in scores.items()}
    selectors = {s: make_selector(s, task.answer_key, stored, config.strategy_args)
                 for s in strategies}
    results = item_results(item.id, item.prompt, samples, config.ns, selectors,
                           run_seed=config.seed, max_subsets=config.max_subsets)
    tokens = [s.completion.num_tokens for s in samples]
    for s in strategies:
        for n in config.ns:
            results += cost_results(s, n, *backends.cost.subsampled(SUBSAMPLED[s], item.prompt,
                                                                     tokens, n))
    return results, scores


def _run_direct(config: EvalConfig, task: TaskSpec, item: EvalItem, backends: Backends,
                store: Any, strategy: str) -> list[ItemResult] | None:
    """Run ``greedy`` or a :data:`~metagen.eval.direct.DIRECT` strategy at every N on one item,
    up to ``config.attempts`` times, logging failures; its results, or None."""
    for _ in range(config.attempts):
        if strategy == GREEDY:
            results, failures = greedy_item(task, item, backends.generator, config.sampling,
                                            backends.cost)
        elif strategy in ADAPTIVE:
            results, failures = adaptive_item(strategy, task, item, backends.generator,
                                              config.sampling, config.ns, config.seed,
                                              config.strategy_args)
        else:
            results, failures = direct_item(strategy, task, item, backends.generator,
                                            backends.scorers.get(PRM), config.sampling,
                                            config.ns, config.seed, config.strategy_args)
        if not failures:
            return results
        store.save_item(item.id, (), failures)
    return None


def _sample(config: EvalConfig, task: TaskSpec, item: EvalItem, generator: Any, seed: int,
            have: set[int]) -> tuple[list[StoredSample], list[tuple[int | None, str]]]:
    """One generate call for the item's ``n_max`` samples; the new successful ones (indices not
    in ``have``), graded, and (index, reason) of each failed or empty one. A backend error on the
    whole call, or a prompt the backend refuses (longer than its context: ``InvalidPromptError``),
    fails every missing sample with the error's type as reason; the other items are unaffected."""
    n_max = max(config.ns)
    missing = [j for j in range(n_max) if j not in have]
    try:
        row = check_counts(generator.generate([item.prompt], config.sampling.with_(
            n=n_max, seed=seed)), 1, n_max, type(generator).__name__)[0]
    except (BackendError, InvalidPromptError) as exc:  # this item fails; the run goes on
        return [], [(j, type(exc).__name__) for j in missing]
    new: list[StoredSample] = []
    failures: list[tuple[int | None, str]] = []
    for j in missing:
        reason = _failure(row[j])
        if reason is not None:
            failures.append((j, reason))
        else:
            new.append(StoredSample(j, seed, row[j],
                                    bool(task.grade(row[j].text, item.problem))))
    return new, failures


def _failure(c: Completion) -> str | None:
    reason = failure_reason(c)
    if reason is None and c.text == "":
        return "empty"
    return reason


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
        "generated_tokens": store.token_count() + own_generated_tokens(rows, SUBSAMPLED),
        "results": summarize(rows),
        **difficulty_tables(read_run_rows(store, sorted(ids))),
        "times": {"started_at": store.first_started_at(), "session_started_at": started,
                  "ended_at": ended, "sessions": store.sessions(), "resumed_items": resumed},
    }
