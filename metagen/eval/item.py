"""One item of a run, done against a store (the run's, or a recording one in a worker): its
samples drawn once at the largest N (failed ones retried), each scorer the subsampled strategies
read scoring every sample once, their metrics and costs at every N, then ``greedy`` and the
strategies run at each N (the registry's other families: :mod:`metagen.eval.direct`);
everything but the samples stored by one final ``save_item``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.errors import BackendError, InvalidPromptError
from metagen.eval.backends import Backends
from metagen.eval.catalog import GREEDY, is_subsampled, spec_of, stored_scorer
from metagen.eval.config import PRM, EvalConfig
from metagen.eval.cost import cost_results
from metagen.eval.direct import spec_item
from metagen.eval.greedy import greedy_item
from metagen.eval.metrics import item_results
from metagen.eval.recording import SaveCall
from metagen.eval.seeds import item_seed
from metagen.eval.selectors import StoredReward
from metagen.eval.store import ItemResult, StoredSample
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.eval.timing import Stopwatch, with_seconds
from metagen.scorers.callables import check_scores
from metagen.scorers.prm_outcome import PRMOutcome
from metagen.strategies.parallel import check_counts, failure_reason
from metagen.types import Completion

WorkUnit = tuple[EvalItem, dict[int, StoredSample], dict[str, dict[int, float]]]
Finished = tuple[str, bool, list[SaveCall], str]  # item id, done, its save_item calls, backend


def run_item(config: EvalConfig, task: TaskSpec, item: EvalItem, backends: Backends,
             store: Any) -> bool:
    """Do one item into ``store`` (the run's :class:`~metagen.eval.store.RunStore`, or a
    :class:`~metagen.eval.recording.RecordingStore`): the subsampled strategies from its
    samples, then ``greedy`` and each strategy run at each N; every result, the scores and the done mark
    are stored by ONE final ``save_item`` (the samples as they are drawn). True when done."""
    results: list[ItemResult] = []
    scores: dict[str, dict[int, float]] = {}
    ok = True
    subsampled = [s for s in config.strategies if is_subsampled(s)]
    if subsampled:
        got = _run_subsampled(config, task, item, backends, store, subsampled)
        ok = got is not None
        if got is not None:
            results += got[0]
            scores = got[1]
    for strategy in config.strategies:
        if ok and not is_subsampled(strategy):
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
    sampling = Stopwatch()
    for _ in range(config.attempts):
        if len(have) == n_max:
            break
        with sampling:
            new, failures = _sample(config, task, item, backends.generator, seed, set(have))
        store.save_item(item.id, new, failures)
        have.update({s.index: s for s in new})
    if len(have) < n_max:
        return None
    samples = [have[j] for j in range(n_max)]
    texts = [s.completion.text for s in samples]
    scores: dict[str, dict[int, float]] = {}
    reads = {s: stored_scorer(s, config.configured) for s in strategies}
    scoring: dict[str, Stopwatch] = {}
    for name in sorted({x for x in reads.values() if x}):
        values = store.scores(item.id, name)
        if len(values) < n_max:
            scorer = backends.scorers[name]
            if name == PRM:  # a PRM's score of a whole sample: min over its steps
                scorer = PRMOutcome(scorer)
            with scoring.setdefault(name, Stopwatch()):
                got = check_scores(scorer.score([item.prompt] * n_max, texts), n_max,
                                   who=type(scorer).__name__)
            values = {j: float(v) for j, v in enumerate(got)}
        scores[name] = values
    stored = {name: StoredReward(texts, [v[j] for j in range(n_max)])
              for name, v in scores.items()}
    options = config.options
    selectors = {s: spec_of(s).selector(stored.get(x) if (x := reads[s]) else None,
                                        task.answer_key, options[s]) for s in strategies}
    results = with_seconds(item_results(item.id, item.prompt, samples, config.ns, selectors,
                                        run_seed=config.seed, max_subsets=config.max_subsets),
                           lambda r: sampling.elapsed + scoring.get(
                               reads.get(r.strategy) or "", Stopwatch()).elapsed,
                           started=sampling.started or min(
                               (w.started for w in scoring.values() if w.started), default=None))
    tokens = [s.completion.num_tokens for s in samples]
    for s in strategies:
        for n in config.ns:
            results += cost_results(s, n, *backends.cost.subsampled(reads[s], item.prompt,
                                                                     tokens, n))
    return results, scores


def _run_direct(config: EvalConfig, task: TaskSpec, item: EvalItem, backends: Backends,
                store: Any, strategy: str) -> list[ItemResult] | None:
    """Run ``greedy`` or a strategy of the registry that is not subsampled at every N on one
    item (:func:`~metagen.eval.direct.spec_item`), up to ``config.attempts`` times, logging
    failures; its results, or None."""
    options = config.options.get(strategy, {})
    for _ in range(config.attempts):
        if strategy == GREEDY:
            results, failures = greedy_item(task, item, backends.generator, config.params,
                                            backends.cost)
        else:
            results, failures = spec_item(strategy, task, item, backends.generator,
                                          backends.scorers, config.configured, config.params,
                                          config.ns, config.seed, options)
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
        row = check_counts(generator.generate([item.prompt], config.params.with_(
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


