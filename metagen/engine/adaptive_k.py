"""How many tokens to draft: ``k`` chosen per row from its running acceptance rate.

A round of speculative decoding drafts ``k`` tokens and verifies them in one target step. If each
draft is accepted with probability ``a`` until the first rejection, the round emits on average
``1 + a + ... + a^k`` tokens (:func:`expected_tokens`; the last one is the target's corrected or
bonus token). Its cost, in target decode steps, is ``1 + k * (draft_cost + verify_cost)``
(:func:`round_cost`): ``k`` draft steps of ``draft_cost`` each (0 for prompt lookup) and ``k``
more tokens in the verification step at ``verify_cost`` each. :func:`best_k` maximises tokens
per cost; with ``k_min`` = 0 it may choose no drafts at all (a plain decode step, 1 token per
step), which wins where a round's expected tokens do not pay for its draft and verify cost (a
draft that seldom agrees, or one that costs near a target step). Decoding is weight streaming
plus a fixed cost per engine step (scheduling, sampling, Python), so a draft step's cost is a
ratio of bytes with that fixed cost counted as :data:`STEP_OVERHEAD_BYTES`
(:func:`draft_step_cost`): the engine benchmark's int8 draft costs 0.073 of its float32 target's
step (0.06-0.08 measured), a tiny model's draft almost a whole step. A verified token's cost
depends on whether the target's products are bound by bandwidth or by the multiply rate
(:func:`verify_step_cost`): float weights at a few rows stream as one row does, and one more
token costs :data:`VERIFY_COST` = 0.1 of a step (0.08-0.15 measured); int8 / int4 products are
bound by the multiply rate already at one row on a CPU without VNNI, and one more token costs
:data:`QUANTIZED_VERIFY_COST` = 0.4 (0.17-0.45 measured: ``python -m benchmarks.spec_costs``, on
the 2-core AVX2 EPYC; not measured with VNNI, where it is likely lower and adaptive k then
drafts less than would pay).

:class:`AcceptanceTracker` estimates a row's ``a`` from its own rounds only (never from the
other rows of a batch, so a seeded row's drafts do not depend on its batch): with ``A`` drafts
accepted and ``R`` rounds that ended in a rejection, the maximum-likelihood estimate of a
geometric stop is ``A / (A + R)``; both counts decay by ``decay`` each round so the estimate
follows the text (copying a number, then writing new words), from a prior of ``prior`` with the
weight of one round. A row that drafts nothing learns nothing, so a speculator that lets
``k`` fall to 0 probes: after :func:`probe_interval` such steps of a row (8, more where a
probe's draft step and verified token cost over 0.16 target steps, so that probing costs at
most 0.02 steps a token) it drafts one token (:attr:`AcceptanceTracker.skipped` counts them),
and the estimate can rise again when the text turns predictable; where no round could pay even
at acceptance 1 (a draft that costs about a target step), it never probes. ``k`` only changes
how fast a row decodes: greedy output is the target's greedy output and sampled output follows
the target's distribution for every ``k``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from metagen.engine.models.quantize import quantization_of
from metagen.errors import InvalidParameterError

if TYPE_CHECKING:
    from metagen.engine.models.interface import CausalLM

VERIFY_COST = 0.1  # one more verified token, in target decode steps (module docstring)
QUANTIZED_VERIFY_COST = 0.4  # the same for an int8 / int4 target (module docstring)
# A row at k = 0 probes (drafts one token) after at least this many plain steps, more where a
# probe is dear (probe_interval).
PROBE_MIN_STEPS = 8
# What probing may cost a row at k = 0, in target steps per token (probe_interval).
PROBE_BUDGET = 0.02
# An engine step's fixed cost (scheduling, sampling, Python: stories260K, whose 1 MB of weights
# sit in L2, decodes a token in 120-150 us on the 2-core AVX2 EPYC at one thread) as the bytes of
# weights streamed in that time (~18 GB/s there).
STEP_OVERHEAD_BYTES = 2_500_000


def expected_tokens(acceptance: float, k: int) -> float:
    """Mean tokens of a round of ``k`` drafts, each accepted with probability ``acceptance``
    until the first rejection: ``sum(acceptance**i for i in range(k + 1))``."""
    return sum(acceptance ** i for i in range(k + 1))


def round_cost(k: int, draft_cost: float, verify_cost: float = VERIFY_COST) -> float:
    """Cost of a round of ``k`` drafts in target decode steps (module docstring)."""
    return 1.0 + k * (draft_cost + verify_cost)


def best_k(acceptance: float, k_max: int, draft_cost: float,
           verify_cost: float = VERIFY_COST, k_min: int = 1) -> int:
    """The ``k`` in ``k_min..k_max`` with the most expected tokens per cost (the smallest on
    ties); ``k_min`` 0 allows no drafts (a plain step: one token at cost 1).

    ``acceptance`` in [0, 1]; ``draft_cost``, ``verify_cost`` >= 0 (target decode steps);
    ``k_min`` 0 or 1."""
    if not 0.0 <= acceptance <= 1.0:
        raise InvalidParameterError("acceptance", acceptance, "must be in [0, 1]")
    if not isinstance(k_max, int) or isinstance(k_max, bool) or k_max < 1:
        raise InvalidParameterError("k_max", k_max, "must be a positive integer")
    if k_min not in (0, 1) or isinstance(k_min, bool):
        raise InvalidParameterError("k_min", k_min, "must be 0 or 1")
    for name, cost in (("draft_cost", draft_cost), ("verify_cost", verify_cost)):
        if not cost >= 0.0:
            raise InvalidParameterError(name, cost, "must be >= 0")
    ks = range(k_min, k_max + 1)
    return max(ks, key=lambda k: (expected_tokens(acceptance, k)
                                  / round_cost(k, draft_cost, verify_cost), -k))


def verify_step_cost(target: CausalLM) -> float:
    """One more verified token's cost in ``target``'s one-token decode steps:
    :data:`VERIFY_COST` for float weights, :data:`QUANTIZED_VERIFY_COST` for int8 / int4 ones
    (``quantization_of``), whose products are bound by the multiply rate already at one row."""
    return VERIFY_COST if quantization_of(target) is None else QUANTIZED_VERIFY_COST


def probe_interval(draft_cost: float, verify_cost: float = VERIFY_COST,
                   k_max: int = 1) -> int | None:
    """Plain steps a row at k = 0 decodes before it probes: at least :data:`PROBE_MIN_STEPS`,
    and enough that a probe's worst case (its draft step and verified token both wasted:
    ``draft_cost + verify_cost`` target steps) spread over them stays within
    :data:`PROBE_BUDGET` target steps per token. None (never probe) where no round of at most
    ``k_max`` drafts would pay even if every draft were accepted. Costs >= 0, ``k_max`` >= 1."""
    if best_k(1.0, k_max, draft_cost, verify_cost, k_min=0) == 0:  # checks the parameters
        return None
    return max(PROBE_MIN_STEPS, math.ceil((draft_cost + verify_cost) / PROBE_BUDGET))


def draft_step_cost(draft: CausalLM, target: CausalLM,
                    overhead_bytes: int = STEP_OVERHEAD_BYTES) -> float:
    """A draft decode step's cost in target steps: the ratio of the bytes a decode step reads,
    each step's fixed cost counted as ``overhead_bytes`` more. A step reads every stored tensor
    (parameters and buffers: int8 weights are buffers) except an embedding table that is not
    also the LM head (a model's ``embed`` with ``lm_head`` set): of that it reads one row per
    token. (Counting the whole table put the engine benchmark's int8 draft at 0.24 target steps,
    where its step measures ~0.15.)"""
    def nbytes(m: CausalLM) -> int:
        total = sum(t.numel() * t.element_size() for t in (*m.parameters(), *m.buffers()))
        embed = getattr(m, "embed", None)
        if isinstance(embed, torch.Tensor) and getattr(m, "lm_head", None) is not None:
            total -= (embed.shape[0] - 1) * embed[0].numel() * embed.element_size()
        return total + overhead_bytes
    return nbytes(draft) / nbytes(target)


@dataclass(slots=True)
class AcceptanceTracker:
    """A row's running acceptance estimate (module docstring)."""

    prior: float = 0.7
    decay: float = 0.8
    accepted: float = 0.0
    rejected: float = 0.0
    skipped: int = 0  # steps without drafts since the row last drafted (module docstring)

    def __post_init__(self) -> None:
        if not 0.0 <= self.prior <= 1.0:
            raise InvalidParameterError("prior", self.prior, "must be in [0, 1]")
        if not 0.0 < self.decay <= 1.0:
            raise InvalidParameterError("decay", self.decay, "must be in (0, 1]")
        if self.accepted == 0.0 and self.rejected == 0.0:
            self.accepted, self.rejected = self.prior, 1.0 - self.prior

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)

    def update(self, num_draft: int, num_accepted: int) -> None:
        """Record a verified round: ``num_accepted`` of ``num_draft`` drafts accepted (a round
        without drafts records nothing)."""
        if num_draft <= 0:
            return
        self.accepted = self.decay * self.accepted + num_accepted
        self.rejected = self.decay * self.rejected + (num_accepted < num_draft)
