"""The ``greedy`` baseline: one temperature-0 sample per item, at N = 1 only.

Its cost is that one sample's generated tokens and its FLOPs estimate
(:class:`~metagen.eval.cost.CostModel`). A failed or empty sample (or a backend error, or a
prompt the backend refuses) is not a result: it is logged by reason and retried (L7).
"""

from __future__ import annotations

from typing import Any

from metagen.errors import BackendError, InvalidPromptError
from metagen.eval.catalog import GREEDY
from metagen.eval.cost import CostModel, cost_results
from metagen.eval.direct import ACCURACY
from metagen.eval.store import ItemResult
from metagen.eval.tasks import EvalItem, TaskSpec
from metagen.eval.timing import Stopwatch, timed
from metagen.strategies.parallel import check_counts, failure_reason
from metagen.types import SamplingParams



def greedy_item(task: TaskSpec, item: EvalItem, generator: Any, sampling: SamplingParams,
                cost: CostModel) -> tuple[list[ItemResult], list[tuple[int | None, str]]]:
    """(the N = 1 accuracy and cost rows, failures): ``sampling`` with ``n=1`` and
    ``temperature=0`` (its other parameters, e.g. ``max_tokens``, kept)."""
    params = sampling.with_(n=1, temperature=0.0, seed=None)
    watch = Stopwatch()
    try:
        with watch:
            c = check_counts(generator.generate([item.prompt], params), 1, 1,
                             type(generator).__name__)[0][0]
    except (BackendError, InvalidPromptError) as exc:
        return [], [(0, type(exc).__name__)]
    reason = failure_reason(c) or ("empty" if c.text == "" else None)
    if reason is not None:
        return [], [(0, reason)]
    correct = bool(task.grade(c.text, item.problem))
    return ([ItemResult(GREEDY, 1, ACCURACY, float(correct),
                        {"text": c.text, **timed(watch.elapsed, watch.started)}),
             *cost_results(GREEDY, 1, c.num_tokens,
                           cost.sampling(item.prompt, [c.num_tokens], 1))], [])
