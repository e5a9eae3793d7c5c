"""What one item's strategies cost at each N: generated tokens and FLOPs. The one place this
meaning is written: the runner records it as cost rows and the report derives from it what a
store lacks (:mod:`metagen.report.costs`).

Subsampled strategies and ``greedy`` are charged deterministic estimates from the stored token
counts (never measured usage, which depends on what the prefix cache held and on concurrent
callers, so a resumed or concurrent run would differ); strategies run on their own at each N
(the registry's ``each_n``, ``adaptive`` and ``refinement`` families) are charged their run's
measured usage (:func:`measured_cost`).

Subsampled strategies at N are charged the EXPECTED cost of N of the item's samples: ``N x mean``
over the ``max(ns)`` samples of generated tokens (the exact mean over all size-N subsets, since
every sample is in the same share of them), and FLOPs of one prompt prefill plus ``N x mean``
decoding (:class:`~metagen.generators.flops.FlopModel`, no prefix cache; the N samples share the
prefill, as the engine forks them), plus, for strategies that read a scorer's scores (the one
their spec needs, or an optional one the run gives:
:func:`~metagen.eval.catalog.stored_scorer`), that scorer's prefill plus ``N x mean`` pass over
each sample. Prompt lengths come from the policy's
tokenizer and are used for the scorer too (the testbed's models share one). A FLOP count that
cannot be known (a remote policy or scorer without a model to count) is NaN and not recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metagen.eval.store import ItemResult
from metagen.generators.base import Prompt
from metagen.generators.flops import FlopModel
from metagen.types import Usage

TOKENS = "generated_tokens"  # the metric names of the cost rows in the store
FLOPS = "flops"


def expected_tokens(generated: Sequence[int], n: float) -> float:
    """Expected generated tokens of ``n`` of an item's samples, ``generated`` holding each
    sample's count: ``n`` x their mean (the exact mean over every size-``n`` subset). NaN when
    there are no samples."""
    return n * math.fsum(generated) / len(generated) if generated else math.nan


def measured_cost(usage: Usage | Mapping[str, Any]) -> tuple[float, float]:
    """(generated tokens, FLOPs) of a run measured by its ``usage`` (a :class:`Usage`, or its
    ``to_dict()`` as a trace stores it): its generated tokens and its generator plus scorer
    FLOPs. A part that is missing or not a finite number is NaN (unknown)."""
    got = usage.to_dict() if isinstance(usage, Usage) else usage
    tokens = _finite(got.get("generated_tokens"))
    return tokens, _finite(got.get("generator_flops")) + _finite(got.get("scorer_flops"))


def _finite(value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    return float(value) if ok else math.nan


def shared_prefill_flops(model: FlopModel | None, prompt_tokens: int | None,
                         lengths: Sequence[int], n: float) -> float:
    """FLOPs of one prefill of a ``prompt_tokens`` prompt, then ``n`` runs after it, each of the
    mean cost of running ``lengths[j]`` tokens at the prompt's end. NaN when the model or the
    prompt length is unknown; 0 for no ``lengths``."""
    if model is None or prompt_tokens is None:
        return math.nan
    if not lengths:
        return 0.0
    mean = math.fsum(model.forward(prompt_tokens, k) for k in lengths) / len(lengths)
    return model.forward(0, prompt_tokens) + n * mean


@dataclass(slots=True, frozen=True)
class CostModel:
    """FLOP models of the policy (``generator``) and of each scorer by store name, and the
    policy's prompt length counter; any of them None when unknown."""

    generator: FlopModel | None = None
    count_tokens: Callable[[Prompt], int] | None = None
    scorers: Mapping[str, FlopModel | None] = field(default_factory=dict)

    def prompt_tokens(self, prompt: Prompt) -> int | None:
        return None if self.count_tokens is None else self.count_tokens(prompt)

    def sampling(self, prompt: Prompt, generated: Sequence[int], n: float) -> float:
        """FLOPs of ``n`` samples (of the mean of ``generated`` tokens) from one prompt; the last
        token of each is never fed back."""
        return shared_prefill_flops(self.generator, self.prompt_tokens(prompt),
                                    [max(g - 1, 0) for g in generated], n)

    def scoring(self, scorer: str, prompt: Prompt, generated: Sequence[int], n: float) -> float:
        """FLOPs of scorer ``scorer`` reading ``n`` of the samples after one prompt pass."""
        return shared_prefill_flops(self.scorers.get(scorer), self.prompt_tokens(prompt),
                                    list(generated), n)

    def subsampled(self, scorer: str | None, prompt: Prompt, generated: Sequence[int],
                   n: float) -> tuple[float, float]:
        """(tokens, FLOPs) of a subsampled strategy at ``n`` over the item's samples
        (``generated``: each sample's token count): :func:`expected_tokens`, and
        :meth:`sampling` plus, when the strategy reads ``scorer``'s scores, :meth:`scoring`."""
        flops = self.sampling(prompt, generated, n)
        if scorer is not None:
            flops += self.scoring(scorer, prompt, generated, n)
        return expected_tokens(generated, n), flops


def flop_model_of_backend(obj: Any) -> FlopModel | None:
    """The FLOP model of a local policy or scorer: the engine's model config
    (:class:`~metagen.generators.local.LocalGenerator`), a backend's own ``flop_model``
    (``HFGenerator``) or its torch ``model`` (the transformers scorers); None otherwise."""
    engine = getattr(obj, "engine", None)
    cfg = getattr(getattr(engine, "model", None), "cfg", None)
    if cfg is not None:
        return FlopModel(matmul_params=int(cfg.num_params), layers=int(cfg.num_layers),
                         attn_dim=int(cfg.num_heads * cfg.head_dim))
    own = getattr(obj, "flop_model", None)
    if isinstance(own, FlopModel):
        return own
    model = getattr(obj, "model", None)
    if model is not None and hasattr(model, "parameters") and hasattr(model, "config"):
        from metagen.generators.flops import flop_model_of
        return flop_model_of(model)
    return None


def cost_model_for(generator: Any, scorers: Mapping[str, Any]) -> CostModel:
    """The :class:`CostModel` of a run's policy and scorers (by store name)."""
    tokenizer = getattr(generator, "tokenizer", None)
    count: Callable[[Prompt], int] | None = None
    if tokenizer is not None:
        from metagen.generators.tokenize import encode_prompt

        def count(prompt: Prompt) -> int:
            return len(encode_prompt(tokenizer, prompt))
    return CostModel(flop_model_of_backend(generator), count,
                     {name: flop_model_of_backend(s) for name, s in scorers.items()})


def cost_results(strategy: str, n: int, tokens: float, flops: float) -> list[ItemResult]:
    """The cost rows of one item's ``strategy`` at ``n``: :data:`TOKENS`, and :data:`FLOPS`
    unless it is unknown (NaN)."""
    rows = [ItemResult(strategy, n, TOKENS, float(tokens), {})]
    if not math.isnan(flops):
        rows.append(ItemResult(strategy, n, FLOPS, float(flops), {}))
    return rows


def own_generated_tokens(rows: Iterable[tuple[str, str, int, str, float]],
                         shared: Collection[str]) -> int:
    """Tokens the strategies NOT in ``shared`` generated themselves (``greedy``, the step
    searches: each item and N its own run): the sum of their :data:`TOKENS` rows, given as the
    store's ``(item, strategy, n, metric, value)``. The ``shared`` strategies' rows are excluded:
    they are expected costs of subsets of the one stored sample set, counted once with it."""
    return round(math.fsum(r[4] for r in rows if r[3] == TOKENS and r[1] not in shared))
