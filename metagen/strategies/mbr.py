"""Minimum Bayes risk selection (Bertsch et al. 2023, "It's MBR all the way down"; Kumar &
Byrne 2004): choose the candidate with the highest expected utility against the others used as
pseudo-references, ``E[u(h)] = sum_j w_j u(h, r_j) / sum_j w_j``.

- ``utility``: a :class:`~metagen.scorers.base.Utility`, a callable ``u(hyp, ref) -> float``, or a
  name: ``"answer"`` (answer match — MBR is then majority voting, and selects exactly what
  :func:`~metagen.strategies.voting.self_consistency` selects; ``answer_key`` gives a task's
  extraction and equivalence, e.g. MATH-500's, and the other utilities ignore it), ``"chrf"``,
  ``"bleu"``, ``"rouge"`` (rougeL), ``"embedding"`` (cosine, optional package). Execution agreement:
  pass an :class:`~metagen.scorers.execution.ExecutionAgreementUtility` (explicit opt-in).
- ``weighting``: ``"uniform"`` (Monte Carlo over samples, the default) or ``"logprob"``: the
  model's own probability of each pseudo-reference, ``softmax(cumulative_logprob)`` — the
  model-weighted expectation.
- ``method``: ``"exact"`` (N x N utility matrix), ``"aggregate"`` (reference aggregation, O(N):
  utility against the weighted mean reference — DeNero et al. 2009, Vamvas & Sennrich 2024; needs
  a utility with ``aggregate``: chrF, embedding) or ``"prune"`` (confidence-based pruning, Cheng &
  Vlachos 2023: grow the reference set along ``schedule``, after each stage drop hypotheses whose
  bootstrap probability of being at least as good as the current best is below ``1 - alpha``).

Ties: the lowest candidate index wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from metagen.answers.key import AnswerKey
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.scorers.base import AggregatingUtility, Utility, UtilityLike
from metagen.strategies.budget import Budget
from metagen.strategies.parallel import run_parallel
from metagen.strategies.selection import Selection, argmax_first, scorers_usage
from metagen.strategies.spec import StrategySpec, param
from metagen.types import Completion, Result, SamplingParams, Usage

Method = Literal["exact", "aggregate", "prune"]
Weighting = Literal["uniform", "logprob"]


class PairwiseUtility:
    """A Utility over a plain callable ``u(hyp, ref) -> float``."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[str, str], float]) -> None:
        self.fn = fn

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        return [[float(self.fn(h, r)) for r in refs] for h in hyps]


def resolve_utility(utility: UtilityLike | str) -> Utility:
    """A Utility object from a name, a Utility, or a callable."""
    from metagen.scorers import utilities as u

    names = {"answer": u.AnswerMatchUtility, "chrf": u.ChrFUtility, "bleu": u.BleuUtility,
             "rouge": u.RougeUtility, "embedding": u.EmbeddingCosineUtility}
    if isinstance(utility, str):
        if utility not in names:
            raise InvalidParameterError("utility", utility, f"must be one of {sorted(names)}, "
                                        "a Utility or a callable")
        return names[utility]()
    if callable(getattr(utility, "matrix", None)):
        return cast(Utility, utility)
    if callable(utility):
        return PairwiseUtility(utility)
    raise InvalidParameterError("utility", utility, "must be a name, a Utility or a callable")


def expected_utility(matrix: Sequence[Sequence[float]], weights: Sequence[float]) -> list[float]:
    """``out[i] = sum_j w_j m[i][j] / sum_j w_j``; raises on NaN (a failed utility)."""
    total = float(sum(weights))
    if total <= 0:
        raise InvalidParameterError("weights", list(weights), "must have a positive sum")
    out = []
    for row in matrix:
        value = sum(w * m for w, m in zip(weights, row)) / total
        if math.isnan(value):
            raise ValueError(f"utility returned NaN in row {row}")
        out.append(value)
    return out


def model_weights(group: Sequence[Completion]) -> list[float]:
    """``softmax(cumulative_logprob)`` over the group (needs logprobs from the backend)."""
    logprobs = [c.cumulative_logprob for c in group]
    known = [lp for lp in logprobs if lp is not None]
    if len(known) != len(logprobs):
        raise CapabilityError("mbr weighting='logprob' needs completions with cumulative_logprob")
    top = max(known)
    return [math.exp(lp - top) for lp in known]


def mbr_prune(matrix: Callable[[list[int], list[int]], list[list[float]]], n: int, *,
              schedule: Sequence[int] = (4, 8, 16, 32), alpha: float = 0.99,
              n_bootstrap: int = 200, seed: int = 0) -> tuple[int, list[float], dict[str, Any]]:
    """Confidence-based pruning MBR (Cheng & Vlachos 2023) with uniform reference weights.

    ``matrix(hyp_ids, ref_ids)`` computes utilities for index subsets (hypotheses and
    references are the same N candidates, references taken in sample order). Returns (best
    index, each hypothesis's expected utility over the references it was last evaluated on —
    a pruned one keeps its estimate from the stage it was pruned at, trace with the stages).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    alive = list(range(n))
    cols: dict[tuple[int, int], float] = {}
    used = 0
    estimates = [0.0] * n
    stages = []
    sizes = sorted({min(s, n) for s in schedule if s > 0} | {n})
    for size in sizes:
        new_refs = list(range(used, size))
        if new_refs:
            block = matrix(alive, new_refs)
            for a, row in zip(alive, block):
                for r, value in zip(new_refs, row):
                    cols[(a, r)] = float(value)
        used = size
        util = np.array([[cols[(a, r)] for r in range(used)] for a in alive])  # (A, R)
        means = util.mean(1)
        for a, m in zip(alive, means):
            estimates[a] = float(m)
        stages.append({"refs": used, "alive": list(alive)})
        if used == n or len(alive) == 1:
            break
        best = int(argmax_first(list(means)))
        boot = rng.integers(0, used, size=(n_bootstrap, used))  # (B, R)
        sample_means = util[:, boot].mean(-1)  # (A, B)
        win = (sample_means >= sample_means[best]).mean(1)  # P(h at least as good as best)
        alive = [a for k, a in enumerate(alive) if k == best or win[k] >= 1 - alpha]
    final = [estimates[a] for a in alive]
    best_index = alive[argmax_first(final)]
    evaluations = len(cols)
    return best_index, estimates, {"stages": stages, "utility_evaluations": evaluations}


class MBR:
    """Selector: minimum Bayes risk. See the module docstring for the options."""

    name = "mbr"

    def __init__(self, utility: UtilityLike | str = "answer", *, weighting: Weighting = "uniform",
                 method: Method = "exact", schedule: Sequence[int] = (4, 8, 16, 32),
                 alpha: float = 0.99, n_bootstrap: int = 200, seed: int = 0,
                 answer_key: AnswerKey | None = None) -> None:
        if weighting not in ("uniform", "logprob"):
            raise InvalidParameterError("weighting", weighting, "must be 'uniform' or 'logprob'")
        if method not in ("exact", "aggregate", "prune"):
            raise InvalidParameterError("method", method, "must be exact, aggregate or prune")
        if not 0 < alpha < 1:
            raise InvalidParameterError("alpha", alpha, "must be in (0, 1)")
        if answer_key is not None and utility == "answer":  # the other utilities compare text
            from metagen.scorers.utilities import AnswerMatchUtility
            self.utility: Utility = AnswerMatchUtility(answer_key=answer_key)
        else:
            self.utility = resolve_utility(utility)
        if method == "aggregate" and not callable(getattr(self.utility, "aggregate", None)):
            raise InvalidParameterError(
                "method", method, f"{type(self.utility).__name__} has no reference aggregation "
                "(chrF and embedding cosine do); use method='exact' or 'prune'")
        if method == "prune" and weighting != "uniform":
            raise InvalidParameterError("weighting", weighting, "pruning uses uniform weights")
        self.weighting, self.method = weighting, method
        self.schedule, self.alpha, self.n_bootstrap, self.seed = schedule, alpha, n_bootstrap, seed

    @property
    def usage(self) -> Usage:
        return scorers_usage(self.utility)

    def select(self, prompts: Sequence[Prompt], groups: Sequence[Sequence[Completion]]
               ) -> list[Selection]:
        return [self._one(group) for group in groups]

    def _one(self, group: Sequence[Completion]) -> Selection:
        texts = [c.text for c in group]
        trace: dict[str, Any] = {"method": self.method, "weighting": self.weighting}
        if self.method == "prune":
            best, scores, info = mbr_prune(
                lambda hs, rs: self.utility.matrix([texts[h] for h in hs], [texts[r] for r in rs]),
                len(texts), schedule=self.schedule, alpha=self.alpha,
                n_bootstrap=self.n_bootstrap, seed=self.seed)
            trace.update(info)
            return Selection(best, _optional(scores), {**trace, "expected_utility": scores})
        weights = [1.0] * len(group) if self.weighting == "uniform" else model_weights(group)
        if self.method == "aggregate":
            aggregating = cast(AggregatingUtility, self.utility)  # checked in __init__
            scores = [float(s) for s in aggregating.aggregate(texts, texts, weights)]
            trace["utility_evaluations"] = len(texts)
        else:
            scores = expected_utility(self.utility.matrix(texts, texts), weights)
            trace["utility_evaluations"] = len(texts) ** 2
        trace["expected_utility"] = scores
        return Selection(argmax_first(scores), _optional(scores), trace)


def _optional(scores: list[float]) -> list[float | None]:
    """The same list, typed as a Selection's scores (every candidate has one here)."""
    return cast("list[float | None]", scores)


def mbr(generator: Generator, prompt: Prompt | Sequence[Prompt], *, n: int = 16,
        utility: UtilityLike | str = "answer", weighting: Weighting = "uniform",
        method: Method = "exact",
        schedule: Sequence[int] = (4, 8, 16, 32), alpha: float = 0.99,
        params: SamplingParams | None = None, budget: Budget | None = None,
        min_successful: int = 1, answer_key: AnswerKey | None = None) -> Result | list[Result]:
    """MBR selection over ``n`` samples (one generate call). ``Result.scores`` are the expected
    utilities; ``trace`` has the method, weighting and the number of utility evaluations."""
    return run_parallel(generator, prompt, MBR(utility, weighting=weighting, method=method,
                                               schedule=schedule, alpha=alpha,
                                               answer_key=answer_key),
                        n=n, params=params, budget=budget, min_successful=min_successful)


@dataclass(frozen=True, slots=True)
class MBRConfig:
    """mbr's parameters besides N (see the module docstring)."""

    utility: Literal["answer", "chrf", "bleu", "rouge", "embedding"] = param(
        "answer", "the utility of a hypothesis against a pseudo-reference")
    weighting: Weighting = param("uniform", "uniform, or each reference's model probability")
    method: Method = param("exact", "exact (N x N), aggregate (reference aggregation) or prune")
    alpha: float = param(0.99, "pruning's confidence, in (0, 1)", lo=0.0, lo_open=True,
                         hi=0.999999)
    min_successful: int = param(1, "fewest successful samples to choose from", lo=1)


def _mbr(scorer: Any, key: AnswerKey | None, options: Mapping[str, Any]) -> MBR:
    return MBR(answer_key=key, **{k: v for k, v in options.items() if k != "min_successful"})


SPEC = StrategySpec("mbr", mbr, "subsampled", "MBR", MBRConfig, selector_factory=_mbr)
