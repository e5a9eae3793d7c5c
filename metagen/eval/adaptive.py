"""Adaptive strategies run directly at each N, without a PRM: adaptive self-consistency (at most N
samples, stopping once the vote is decided) and DeepConf online (N traces at most, a quarter of
them, at least one, as warm-up). Like the step searches (:mod:`metagen.eval.direct`) each N is its
own seeded run and its cost rows are the run's measured usage, so the tokens an adaptive run saves
show on the accuracy-against-tokens curve. ``--strategy-arg`` entries are passed to the strategy
(e.g. ``confidence=0.9``, ``batch=2``, ``keep=0.1``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from metagen.eval.direct import runs_at_each_n
from metagen.eval.store import ItemResult
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.generators.base import Prompt
from metagen.strategies import adaptive_self_consistency, deepconf
from metagen.types import Result, SamplingParams

AdaptiveRun = Callable[[Any, Prompt, int, SamplingParams, dict[str, Any]], Result]


def _adaptive_sc(generator: Any, prompt: Prompt, n: int, params: SamplingParams,
                 kwargs: dict[str, Any]) -> Result:
    res = adaptive_self_consistency(generator, prompt, n=n, params=params, **kwargs)
    assert isinstance(res, Result)
    return res


def _deepconf(generator: Any, prompt: Prompt, n: int, params: SamplingParams,
              kwargs: dict[str, Any]) -> Result:
    kwargs = {"warmup": max(1, n // 4), **kwargs}
    kwargs["warmup"] = min(kwargs["warmup"], n)
    return deepconf(generator, [prompt], n=n, params=params, **kwargs)[0]


#: eval name -> the run of the library's strategy at N
ADAPTIVE: dict[str, AdaptiveRun] = {"adaptive_self_consistency": _adaptive_sc,
                                    "deepconf": _deepconf}


def adaptive_item(strategy: str, task: TaskSpec, item: EvalItem, generator: Any,
                  sampling: SamplingParams, ns: tuple[int, ...], run_seed: int,
                  args: Mapping[str, Any]) -> tuple[list[ItemResult], list[tuple[int | None, str]]]:
    """(results at every N, failures), as :func:`~metagen.eval.direct.direct_item`; the task's
    answer key (when it has one) groups the votes."""
    kwargs = dict(args)
    if task.answer_key is not None:
        kwargs.setdefault("answer_key", task.answer_key)

    def run(n: int, params: SamplingParams) -> Result:
        return ADAPTIVE[strategy](generator, item.prompt, n, params, kwargs)
    return runs_at_each_n(strategy, task, item, sampling, ns, run_seed, run)
