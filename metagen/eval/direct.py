"""Strategies run directly at each N (the step searches): no sampling once and subsampling, each
N is its own seeded run (:func:`~metagen.eval.seeds.direct_seed`) of the library's strategy at
that scale (:func:`~metagen.strategies.step_scaling.run_step_search`'s options for ``n``).

An item's run at some N that lost samples (a failed generate, ``Result.failures``) or found no
answer is not a result: the item stays undone, its failures are logged by reason, and it is
retried (L7). Traces (the search tree, usage) are stored with each result; its cost rows are the
run's measured usage (generated tokens; generator plus PRM FLOPs, as measured: they include what
the prefix cache saved, so they are not estimates like the subsampled strategies' costs).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from metagen.errors import BackendError, InsufficientSamples, InvalidPromptError
from metagen.eval.cost import cost_results, measured_cost
from metagen.eval.seeds import direct_seed
from metagen.eval.store import ItemResult
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.types import Result, SamplingParams

ACCURACY = "accuracy"

#: strategies run at each N: the eval name -> ``run_step_search``'s name (all need a PRM)
DIRECT: dict[str, str] = {"step_beam_search": "step_beam_search", "dvts": "dvts",
                          "best_first": "best_first", "mcts": "mcts", "rebase": "rebase",
                          "particle_filtering": "particle_filtering"}


def direct_item(strategy: str, task: TaskSpec, item: EvalItem, generator: Any, prm: Any,
                sampling: SamplingParams, ns: tuple[int, ...], run_seed: int,
                args: Mapping[str, Any]) -> tuple[list[ItemResult], list[tuple[int | None, str]]]:
    """(results at every N, failures). Results are empty when any N failed (then failures say
    why, one entry per failed sample or failed call)."""
    from metagen.strategies.step_scaling import run_step_search

    def run(n: int, params: SamplingParams) -> Result:
        return run_step_search(DIRECT[strategy], generator, [item.prompt], prm, n,
                               params=params, **args)[0]
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
        try:
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
            "text": result.text, "usage": result.usage.to_dict(), "trace": result.trace}))
        results += cost_results(strategy, n, *measured_cost(result.usage))
    return results, []
