"""Compute budgets: a promise about the compute of one strategy run, kept where it is spent.

A :class:`Budget` caps generated tokens, FLOPs (generator + scorer), backend calls or wall-clock
seconds (the run's calls' wall time). Where each is enforced:

- ``max_calls``: before a call (calls are discrete): no call is made once ``max_calls`` were.
- ``max_generated_tokens``, ``max_flops``, ``max_seconds``: before a call
  (``budget.exhausted(usage)``: nothing left, no call), and *within* it: the call gets
  ``budget.allowance(usage)`` -- what is left of each -- which a step-by-step backend (the
  built-in engine, transformers) enforces between decoding steps: the call's samples share the
  remaining tokens as one pool, the FLOPs become a token pool before the call, and the time
  left is a deadline (:mod:`metagen.allowance`). A sample that the allowance stops ends with
  ``finish_reason="length"`` and ``stop_reason="budget"``; one stopped before its first token is
  empty and is no candidate. A remote server cannot be stopped in flight: there the allowance
  caps ``max_tokens`` before the call (equal shares; :mod:`metagen.generators.metered`) and the
  deadline is checked only between calls.

So generated tokens never exceed ``max_generated_tokens``; FLOPs exceed ``max_flops`` only by a
scorer call (scorers are not stopped in flight) or a preemption's recomputation; wall time
exceeds ``max_seconds`` by at most one decoding step (one whole call on a remote server, plus any
scorer call). A run stopped this way returns ``Result(stopped_by_budget=True)`` with the best so
far. Before their first call strategies ask ``budget.check_generator(generator)``: a FLOP limit
on a generator whose FLOPs are unknown (capability ``flops`` False) is a ``CapabilityError``
before any request.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from metagen.allowance import Allowance
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Capabilities
from metagen.types import Usage


def _positive_or_none(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0:
        raise InvalidParameterError(name, value, "must be a positive finite number or None")


@dataclass(slots=True, frozen=True)
class Budget:
    """Limits on one strategy run; ``None`` means unlimited."""

    max_generated_tokens: int | None = None
    max_flops: float | None = None
    max_calls: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        _positive_or_none("max_generated_tokens", self.max_generated_tokens)
        _positive_or_none("max_flops", self.max_flops)
        _positive_or_none("max_calls", self.max_calls)
        _positive_or_none("max_seconds", self.max_seconds)

    def exhausted(self, usage: Usage) -> bool:
        """True when any limit is reached by ``usage`` (the run's usage so far).

        Raises ``CapabilityError`` for a FLOP limit when the FLOPs are unknown (NaN: a remote
        backend that declared no parameter count), rather than never stopping."""
        if self.max_flops is not None and math.isnan(usage.flops):
            raise CapabilityError("a max_flops budget needs known FLOPs; this generator reports "
                                  "them as unknown (declare its num_params)")
        return (
            (self.max_generated_tokens is not None
             and usage.generated_tokens >= self.max_generated_tokens)
            or (self.max_flops is not None and usage.flops >= self.max_flops)
            or (self.max_calls is not None and usage.calls >= self.max_calls)
            or (self.max_seconds is not None and usage.wall_time >= self.max_seconds)
        )

    def check_generator(self, generator: object) -> None:
        """Raise ``CapabilityError`` before any call when this budget limits FLOPs and
        ``generator`` declares its FLOPs unknown (capability ``flops`` False: a remote server
        without ``num_params``); a FLOP limit it could never apply is refused up front rather
        than after the first call. Reads ``capabilities`` only when ``max_flops`` is set."""
        if self.max_flops is None:
            return
        caps = getattr(generator, "capabilities", None)
        if isinstance(caps, Capabilities) and not caps.flops:
            raise CapabilityError(f"a max_flops budget needs known FLOPs; "
                                  f"{type(generator).__name__} reports them as unknown "
                                  "(declare its num_params)")

    def allowance(self, usage: Usage) -> Allowance:
        """What the next call may spend after ``usage`` (the run's usage so far): the tokens
        and FLOPs left, and a deadline (``time.monotonic()``) when the seconds left run out.
        Ask :meth:`exhausted` first: a spent limit gives an allowance of nothing."""
        flops = None
        if self.max_flops is not None:
            flops = 0.0 if math.isnan(usage.flops) else max(0.0, self.max_flops - usage.flops)
        deadline = None
        if self.max_seconds is not None:
            deadline = time.monotonic() + max(0.0, self.max_seconds - usage.wall_time)
        return Allowance(self.remaining_tokens(usage), flops, deadline)

    def remaining_tokens(self, usage: Usage) -> int | None:
        """Generated tokens still allowed (``None`` when uncapped)."""
        if self.max_generated_tokens is None:
            return None
        return max(0, self.max_generated_tokens - usage.generated_tokens)


UNLIMITED = Budget()
