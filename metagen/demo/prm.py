"""The demo's PRM half: the PRM as an outcome scorer (``best_of_n_prm``) and the PRM step
searches (``step_beam_search``, ``dvts``, ``best_first``, ``mcts``, ``rebase``).

``best_of_n_prm`` is best-of-N over the quick demo's own samples, each scored by the PRM with
the minimum over its steps (Lightman et al. 2023's product/min aggregation; Snell et al. 2024
compare PRM beam search against exactly this baseline). Each step search is its own run over all
prompts at scale ``n`` (:func:`~metagen.strategies.step_scaling.run_step_search`), with its own
measured compute: generator plus PRM tokens and FLOPs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from metagen.demo.difficulty import with_difficulty
from metagen.generators.base import Prompt
from metagen.scorers import aggregate_steps, check_scores, split_steps, usage_of
from metagen.scorers.base import StepAggregation
from metagen.types import SamplingParams, Usage

Stage = Callable[[str, int, int], None]  # (stage, done, total)

# the row names -> metagen.strategies.step_scaling's names
STEP_SEARCH_NAMES: dict[str, str] = {"step_beam_search": "step_beam", "dvts": "dvts",
                                     "best_first": "best_first", "mcts": "mcts",
                                     "rebase": "rebase"}
FULL_STEP_SEARCHES: tuple[str, ...] = tuple(STEP_SEARCH_NAMES)
LEGACY_NAMES = {"step_beam": "step_beam_search"}  # accepted on input; rows keep the given name


class PRMOutcome:
    """A process reward model used as an outcome reward: ``score(prompts, completions)`` splits
    each completion into lines (:func:`~metagen.scorers.split_steps`, the PRM's own step
    definition), scores all of them in ONE ``score_steps`` call and aggregates each chain with
    :func:`~metagen.scorers.aggregate_steps` (default ``min``). An empty completion is one empty
    step (the PRM's value of the bare prompt). ``usage`` is the wrapped PRM's."""

    def __init__(self, prm: Any, aggregation: StepAggregation = "min") -> None:
        aggregate_steps([1.0], aggregation)  # validates the mode
        self.prm, self.aggregation = prm, aggregation

    @property
    def usage(self) -> Usage:
        return usage_of(self.prm)

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        chains = [split_steps(c) or [c] for c in completions]
        per_step = self.prm.score_steps(list(prompts), chains)
        if len(per_step) != len(chains):
            raise ValueError(f"PRM returned {len(per_step)} step lists for {len(chains)} inputs")
        return [aggregate_steps(check_scores(s, len(c), who="PRM"), self.aggregation)
                for s, c in zip(per_step, chains)]


def step_search_rows(names: Sequence[str], step_ns: Sequence[int], generator: Any,
                     prompts: list[str], answers: list[Any], grade: Callable[[str, Any], bool],
                     prm: Any, *, temperature: float, seed: int, stage: Stage,
                     difficulties: Sequence[str] | None = None) -> list[dict]:
    """One row per (search, n), named as in ``names``; ``n`` is the search's scale (samples
    per search step). Compute is the generator's plus the PRM's usage during that run."""
    from metagen.strategies.step_scaling import run_step_search

    rows: list[dict] = []
    total = len(names) * len(step_ns)
    stage("step search", 0, total)
    for name in names:
        internal = STEP_SEARCH_NAMES[LEGACY_NAMES.get(name, name)]
        for n in step_ns:
            start, g0, s0 = time.perf_counter(), generator.usage, usage_of(prm)
            results = run_step_search(internal, generator, prompts, prm, n,
                                      params=SamplingParams(temperature=temperature, seed=seed))
            gen_spent = generator.usage - g0
            spent = gen_spent + (usage_of(prm) - s0)
            correct = [r.best is not None and bool(grade(r.text, a))
                       for r, a in zip(results, answers)]
            rows.append(with_difficulty(
                {"strategy": name, "n": n, "accuracy": sum(correct) / len(prompts),
                 "generated_tokens": spent.generated_tokens, "flops": spent.flops,
                 "seconds": time.perf_counter() - start,
                 # the generator's prompt tokens NOT served from its prefix cache (recomputed)
                 "prefill_tokens": gen_spent.prefilled_tokens},
                correct, difficulties))
            stage("step search", len(rows), total)
    return rows
