"""Any registered strategy as a generator (:class:`RunGenerator`), so that every strategy
composes with every other: ``best_of_n(RunGenerator(gen, get("step_beam_search"), n=4,
scorers=Scorers(prm=prm)), prompt, n=4, reward=rm)`` is best-of-4 over four step beam searches.

``generate(prompts, params)`` returns, for each prompt, ``params.n`` completions: sample ``j`` is
the chosen completion (``Result.best``) of one run of the strategy at scale ``n`` on the prompt
(:meth:`~metagen.strategies.spec.StrategySpec.run`) with ``params`` at ``n=1`` and, when seeded,
the seed ``derive_seed(params.seed, j)`` — so the samples are distinct and reproducible. The
runs of a call go one after the other (each run batches its own generate calls); a run that
chose nothing (every sample failed, or the budget stopped it first) is a failed completion
(``finish_reason="error"``, ``stop_reason`` the run's first failure reason, else
``"no_choice"``) that the outer strategy counts as a failure.

Usage and budgets carry through: :attr:`usage` is the sum of the runs' usage (their generated
tokens, prompts, calls and the scorers' tokens and FLOPs), so an outer strategy's budget — which
reads its generator's usage — sees everything spent inside; ``budget`` caps each inner run.
The parallel strategies have a faster path that samples every group in one call:
:class:`~metagen.strategies.compose.StrategyGenerator`; :func:`~metagen.strategies.compose.
as_generator` picks it for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.generators.base import Generator, Prompt, check_prompts
from metagen.strategies.budget import Budget
from metagen.strategies.compose import OuterGenerator
from metagen.strategies.spec import Scorers, StrategySpec
from metagen.strategies.step_search import derive_seed
from metagen.types import Completion, Result, SamplingParams, Usage


class RunGenerator(OuterGenerator):
    """A :class:`~metagen.generators.base.Generator` whose samples are runs of ``spec`` at scale
    ``n`` over ``generator`` (see the module docstring). Options are checked on construction
    (``InvalidParameterError`` naming the option), scorers on the first run."""

    def __init__(self, generator: Generator, spec: StrategySpec, *, n: int,
                 scorers: Scorers = Scorers(), options: Mapping[str, Any] | None = None,
                 budget: Budget | None = None) -> None:
        spec.kwargs(n, options or {})  # validates n and the options now, not at the first call
        self.generator, self.spec, self.n = generator, spec, n
        self.scorers, self.options, self.budget = scorers, dict(options or {}), budget
        self._usage = Usage()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        prompts = check_prompts(prompts)
        out: list[list[Completion]] = []
        for prompt in prompts:
            row = []
            for j in range(params.n):
                seed = None if params.seed is None else derive_seed(params.seed, j)
                result = self.spec.run(self.generator, prompt, n=self.n,
                                       params=params.with_(n=1, seed=seed), budget=self.budget,
                                       scorers=self.scorers, options=self.options)
                self._usage = self._usage + result.usage
                row.append(_chosen(result))
            out.append(row)
        return out


def _chosen(result: Result) -> Completion:
    if result.best is not None:
        return result.best
    reason = next(iter(sorted(result.failures)), "no_choice")
    return Completion(text="", finish_reason="error", stop_reason=reason)
