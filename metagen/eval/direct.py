"""Strategies run directly at each N: every registered strategy that is not subsampled (the
searches of family ``each_n``, the ``adaptive`` and the ``refinement`` ones). No sampling once
and subsampling: each N is its own seeded run (:func:`~metagen.eval.seeds.direct_seed`) of the
library's strategy through its spec (:meth:`~metagen.strategies.spec.StrategySpec.run`: the
knobs its ``scale`` derives from N, the run's ``--strategy-arg`` entries its config takes, the
scorers it reads, the task's answer key and, for a strategy needing ``feedback``, the task's
feedback on the item).

An item's run at some N that lost samples (a failed generate, ``Result.failures``) or found no
answer is not a result: the item stays undone, its failures are logged by reason, and it is
retried (L7). Traces (the search tree, usage, the run's wall time: :mod:`~metagen.eval.timing`)
are stored with each result; its cost rows are the run's measured usage (generated tokens;
generator plus scorer FLOPs, as measured: they include what the prefix cache saved, so they are
not estimates like the subsampled strategies' costs), so the tokens an adaptive run saves show on
the accuracy-against-tokens curve.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from metagen.errors import (BackendError, InsufficientSamples, InvalidParameterError,
                            InvalidPromptError)
from metagen.eval.catalog import FEEDBACK, GREEDY, reads, spec_of
from metagen.eval.cost import cost_results, measured_cost
from metagen.eval.seeds import direct_seed
from metagen.eval.store import ItemResult
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.eval.timing import Stopwatch, timed
from metagen.strategies.spec import Scorers
from metagen.types import Result, SamplingParams

ACCURACY = "accuracy"


def item_scorers(strategy: str, task: TaskSpec, item: EvalItem, loaded: Mapping[str, Any],
                 configured: Collection[str]) -> Scorers:
    """What ``strategy`` reads on ``item``: the ``loaded`` scorers (by store name) it needs or
    is configured to use, the task's feedback on the item when it needs feedback, the task's
    answer key. ``InvalidParameterError`` naming ``strategy`` when it needs feedback the task
    lacks."""
    wanted = reads(strategy, configured)
    feedback = None
    if FEEDBACK in wanted:
        check_feedback([strategy], task)
        assert task.feedback is not None
        feedback = task.feedback(item.problem)
    return Scorers(**{name: loaded.get(name) for name in wanted - {FEEDBACK}},
                   feedback=feedback, answer_key=task.answer_key)


def check_feedback(strategies: Collection[str], task: TaskSpec) -> None:
    """``InvalidParameterError`` naming ``strategy`` for a strategy that needs feedback on a
    task without a feedback source (:attr:`TaskSpec.feedback`)."""
    for name in strategies:
        if name != GREEDY and FEEDBACK in spec_of(name).needs and task.feedback is None:
            raise InvalidParameterError("strategy", name, f"needs feedback, and task "
                                        f"{task.name} has none (the code tasks' unit tests do)")


def spec_item(strategy: str, task: TaskSpec, item: EvalItem, generator: Any,
              scorers: Mapping[str, Any], configured: Collection[str], sampling: SamplingParams,
              ns: tuple[int, ...], run_seed: int, options: Mapping[str, Any]
              ) -> tuple[list[ItemResult], list[tuple[int | None, str]]]:
    """(results at every N, failures) of the registered ``strategy`` run at each N on one item
    (:func:`runs_at_each_n`); ``options`` are its checked ``--strategy-arg`` entries.
    Results are empty when any N failed (then failures say why, one entry per failed sample
    or failed call)."""
    spec = spec_of(strategy)
    given = item_scorers(strategy, task, item, scorers, configured)

    def run(n: int, params: SamplingParams) -> Result:
        return spec.run(generator, item.prompt, n=n, params=params, scorers=given,
                        options=options)
    return runs_at_each_n(strategy, task, item, sampling, ns, run_seed, run)


def runs_at_each_n(strategy: str, task: TaskSpec, item: EvalItem, sampling: SamplingParams,
                   ns: tuple[int, ...], run_seed: int, run: Callable[[int, SamplingParams], Result]
                   ) -> tuple[list[ItemResult], list[tuple[int | None, str]]]:
    """``run(n, params)`` at every N with ``params = sampling`` seeded by
    :func:`~metagen.eval.seeds.direct_seed`: the accuracy and cost rows, or no rows and the
    failures (a backend error, failed samples by reason, or ``no_answer``) at the first N that
    failed."""
    results: list[ItemResult] = []
    for n in ns:
        params = sampling.with_(n=1, seed=direct_seed(run_seed, item.id, n))
        watch = Stopwatch()
        try:
            with watch:
                result = run(n, params)
        except (BackendError, InsufficientSamples, InvalidPromptError) as exc:
            return [], [(None, type(exc).__name__)]
        failures: list[tuple[int | None, str]] = [
            (None, reason) for reason, count in sorted(result.failures.items())
            for _ in range(count)]
        if result.best is None and not failures:
            failures = [(None, "no_answer")]
        if failures:
            return [], failures
        correct = bool(task.grade(result.text, item.problem))
        results.append(ItemResult(strategy, n, ACCURACY, float(correct), {
            "text": result.text, "usage": result.usage.to_dict(), "trace": result.trace,
            **timed(watch.elapsed, watch.started)}))
        results += cost_results(strategy, n, *measured_cost(result.usage))
    return results, []
