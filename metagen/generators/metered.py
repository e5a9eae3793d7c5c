"""Metered calls: one generate call that keeps to an :class:`~metagen.allowance.Allowance` and
reports the usage of each of its prompts.

A backend that decodes step by step (``LocalGenerator``, ``HFGenerator``) implements
``generate_metered(prompts, params, allowance=None) -> MeteredCall``: it enforces the allowance
in flight (:mod:`metagen.allowance`) and returns, with the completions, one :class:`Usage` per
prompt holding the prompt, cached and generated tokens and the FLOPs of that prompt's own
requests. What the prompts share -- the call itself (``calls`` = 1) and its wall time -- is split
by :func:`share_call`: the call goes to the first prompt, the wall time in equal parts. The parts
add up exactly to what the call added to ``generator.usage``.

:func:`metered_generate` uses that method where a generator's class defines it (a wrapper that
only forwards attributes, e.g. the server's cancellable generator, is called through its own
``generate``). A backend that cannot stop
in flight (a remote server) gets the allowance as a cap on ``max_tokens`` before the call
instead: every sample an equal share of the token pool (``pool // samples``) and, when the
generator declares ``num_params``, of the tokens the FLOPs pay for at ``2 * num_params`` each
(the prompts' cost is not in that cap: their length is the server's); the deadline is not
enforced within such a call. When the cap leaves no token, nothing is sent and every sample comes
back empty (``stop_reason="budget"``), and a sample that ran into the lowered ``max_tokens``
ends with ``stop_reason="budget"``. Its per-prompt usage is the generator's usage delta:
generated tokens exact from each prompt's completions, the other fields apportioned by them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Protocol, cast, runtime_checkable

from metagen.allowance import BUDGET_STOP, Allowance, empty_cut
from metagen.generators.base import Generator, Prompt
from metagen.types import Completion, SamplingParams, Usage


@dataclass(slots=True, frozen=True)
class MeteredCall:
    """``completions[i]``: the ``n`` completions of prompt ``i``; ``usage[i]``: its usage."""

    completions: list[list[Completion]]
    usage: list[Usage]

    @property
    def total(self) -> Usage:
        """The call's usage (the sum of the prompts')."""
        out = Usage()
        for u in self.usage:
            out = out + u
        return out


@runtime_checkable
class MeteredGenerator(Generator, Protocol):
    """A generator that keeps to an allowance in flight and meters each prompt."""

    def generate_metered(self, prompts: Sequence[Prompt], params: SamplingParams,
                         allowance: Allowance | None = None) -> MeteredCall:
        ...


def nothing_run(prompts: int, n: int) -> MeteredCall:
    """The result of a call whose allowance pays for nothing: empty budget-stopped samples and
    zero usage (no call is counted)."""
    return MeteredCall([[empty_cut() for _ in range(n)] for _ in range(prompts)],
                       [Usage() for _ in range(prompts)])


def padded(row: list[Completion], n: int) -> list[Completion]:
    """``row`` with empty budget-stopped samples appended up to ``n`` (the samples an allowance
    stopped before they were forked)."""
    return row + [empty_cut() for _ in range(n - len(row))]


def share_call(own: Sequence[Usage], calls: int, wall_time: float) -> list[Usage]:
    """Each prompt's ``own`` usage plus its part of what the prompts share: ``calls`` go to the
    first prompt, ``wall_time`` in equal parts."""
    k = len(own)
    return [u + Usage(calls=calls if i == 0 else 0, wall_time=wall_time / k)
            for i, u in enumerate(own)]


def metered_generate(generator: Generator, prompts: Sequence[Prompt], params: SamplingParams,
                     allowance: Allowance | None = None) -> MeteredCall:
    """One call of ``generator`` within ``allowance`` (see the module docstring)."""
    if callable(getattr(type(generator), "generate_metered", None)):
        return cast(MeteredGenerator, generator).generate_metered(prompts, params, allowance)
    samples = len(prompts) * params.n
    cap = capped_max_tokens(params.max_tokens, samples, allowance,
                            getattr(generator, "num_params", None))
    if cap < 1:
        return nothing_run(len(prompts), params.n)
    before = generator.usage
    outs = generator.generate(prompts, params if cap == params.max_tokens
                              else params.with_(max_tokens=cap, min_tokens=min(
                                  params.min_tokens, cap)))
    delta = generator.usage - before
    rows = [[_relabel(c, cap, params.max_tokens) for c in row] for row in outs]
    weights = [sum(c.num_tokens for c in row) for row in rows]
    return MeteredCall(rows, apportion(delta, weights))


def _relabel(c: Completion, cap: int, max_tokens: int) -> Completion:
    """A sample that ran into a ``max_tokens`` the allowance lowered was stopped by it."""
    if cap < max_tokens and c.finish_reason == "length" and c.stop_reason is None:
        return replace(c, stop_reason=BUDGET_STOP)
    return c


def capped_max_tokens(max_tokens: int, samples: int, allowance: Allowance | None,
                      num_params: Any) -> int:
    """``max_tokens`` capped to every sample's equal share of the allowance's tokens, and of the
    tokens its FLOPs pay for at ``2 * num_params`` each (when ``num_params`` is a positive int)."""
    if allowance is None:
        return max_tokens
    cap = max_tokens
    if allowance.generated_tokens is not None:
        cap = min(cap, allowance.generated_tokens // samples)
    if allowance.flops is not None and isinstance(num_params, int) and num_params > 0:
        cap = min(cap, int(allowance.flops // (2.0 * num_params)) // samples)
    return cap


def apportion(total: Usage, weights: Sequence[float]) -> list[Usage]:
    """Split ``total`` by ``weights`` (negative ones count as 0; equal when all are 0);
    integer fields by largest remainder (ties: the lower index), so that the parts add up
    exactly to ``total``."""
    k = len(weights)
    w = [max(0.0, float(x)) for x in weights]
    s = sum(w)
    frac = [x / s for x in w] if s > 0 else [1.0 / k] * k
    parts: list[dict[str, Any]] = [{} for _ in range(k)]
    for f in fields(Usage):
        value = getattr(total, f.name)
        if isinstance(value, int):
            raw = [value * q for q in frac]
            base = [int(r) for r in raw]
            order = sorted(range(k), key=lambda i: (base[i] - raw[i], i))
            for i in order[:value - sum(base)]:
                base[i] += 1
            for i in range(k):
                parts[i][f.name] = base[i]
        else:
            for i in range(k):
                parts[i][f.name] = value * frac[i]
    return [Usage(**p) for p in parts]
