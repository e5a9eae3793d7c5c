"""Strategies as generators, so they compose (Welleck et al. 2024: a meta-generator is itself a
generator).

``StrategyGenerator(gen, BestOfN(rm), group=4)`` implements the Generator protocol: its
``generate(prompts, params)`` makes ONE call ``gen.generate(prompts, params(n = n * group))`` and
reduces each consecutive group of ``group`` samples to one completion with the selector (all
groups of all prompts in one selector call). So
``self_consistency(StrategyGenerator(gen, BestOfN(rm), group=4), prompt, n=8)`` votes over 8
best-of-4 winners drawn from a single batch of 32 samples.

A group with fewer than ``min_successful`` successful samples becomes a failed completion
(``finish_reason="error"``, ``stop_reason="insufficient_samples"``), which the outer strategy
counts as a failure. ``usage`` is cumulative: the inner generator's usage deltas plus the
selector's scorer usage. The returned completion is the chosen sample itself (token ids,
logprobs and finish reason as the inner backend produced them).

Any other registered strategy — a step search, an adaptive vote, a refinement — becomes a
generator through :func:`as_generator` (a :class:`~metagen.strategies.run_generator.RunGenerator`
for those): ``best_of_n(as_generator("step_beam_search", gen, n=4, scorers=Scorers(prm=prm)),
prompt, n=4, reward=rm)`` is best-of-4 over step beam searches.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.generators.base import Capabilities, Generator, Prompt, check_prompts
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import check_counts, failure_reason
from metagen.strategies.selection import Selector
from metagen.strategies.spec import Scorers
from metagen.types import Completion, SamplingParams, Usage


class OuterGenerator:
    """The part every strategy-as-generator shares: the ``generator`` it draws from, its own
    cumulative ``usage`` (what its calls spent, selection and scoring included), and what it
    can promise: ``generator``'s logprobs, prefix cache, seeding and FLOP counts; no logits,
    scoring or constraints of its own, and serial calls."""

    generator: Generator
    _usage: Usage

    @property
    def capabilities(self) -> Capabilities:
        caps = self.generator.capabilities
        return Capabilities(logprobs=caps.logprobs, prefix_cache=caps.prefix_cache,
                            seeded=caps.seeded, flops=caps.flops)

    @property
    def usage(self) -> Usage:
        return self._usage


class StrategyGenerator(OuterGenerator):
    """A :class:`~metagen.generators.base.Generator` whose samples are group winners."""

    def __init__(self, generator: Generator, selector: Selector, *, group: int,
                 min_successful: int = 1) -> None:
        if not isinstance(group, int) or isinstance(group, bool) or group < 1:
            raise InvalidParameterError("group", group, "must be a positive integer")
        if not isinstance(min_successful, int) or not 1 <= min_successful <= group:
            raise InvalidParameterError("min_successful", min_successful,
                                        f"must be an int in [1, group={group}]")
        self.generator = generator
        self.selector = selector
        self.group = group
        self.min_successful = min_successful
        self._usage = Usage()

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        prompts = check_prompts(prompts)
        n, g = params.n, self.group
        gen_before, sel_before = self.generator.usage, self.selector.usage
        outs = check_counts(self.generator.generate(prompts, params.with_(n=n * g)),
                            len(prompts), n * g, type(self.generator).__name__)
        groups: list[list[Completion]] = []
        where: list[tuple[int, int]] = []
        out: list[list[Completion]] = []
        for i, row in enumerate(outs):
            out.append([])
            for k in range(n):
                ok = [c for c in row[k * g:(k + 1) * g] if failure_reason(c) is None]
                if len(ok) >= self.min_successful:
                    groups.append(ok)
                    where.append((i, k))
                out[i].append(Completion(text="", finish_reason="error",
                                         stop_reason="insufficient_samples"))
        if groups:
            chosen = self.selector.select([prompts[i] for i, _ in where], groups)
            for (i, k), group, sel in zip(where, groups, chosen):
                out[i][k] = group[sel.index]
        spent = (self.generator.usage - gen_before) + (self.selector.usage - sel_before)
        self._usage = self._usage + spent
        return out


def as_generator(name: str, generator: Generator, *, n: int, scorers: Scorers = Scorers(),
                 options: Mapping[str, Any] | None = None, budget: Budget | None = None
                 ) -> Generator:
    """The registered strategy ``name`` at scale ``n`` as a generator for another strategy.

    A parallel strategy without a per-run ``budget`` is a :class:`StrategyGenerator` over its
    selector (one generate call samples every group; ``min_successful`` from the options); any
    other is a :class:`~metagen.strategies.run_generator.RunGenerator` (one run per sample).
    Raises ``InvalidParameterError`` naming the strategy, an option or a missing scorer."""
    from metagen.strategies.registry import get
    from metagen.strategies.run_generator import RunGenerator

    spec = get(name)
    if spec.family != "subsampled" or budget is not None:
        return RunGenerator(generator, spec, n=n, scorers=scorers, options=options,
                            budget=budget)
    opts = spec.options(options or {})
    lacking = spec.missing(scorers)
    if lacking:
        raise InvalidParameterError(lacking[0], None, f"{name} needs a {lacking[0]}")
    scorer = next((scorers.get(x) for x in sorted(spec.needs | spec.optional)
                   if scorers.get(x) is not None), None)
    return StrategyGenerator(generator, spec.selector(scorer, scorers.answer_key, opts),
                             group=n, min_successful=opts.get("min_successful", 1))
