"""What one generate call may spend, and the rule a step-by-step decoder keeps to it with.

An :class:`Allowance` is handed to a backend that decodes step by step (the built-in engine, the
transformers backend); it is enforced *in flight*, between two decoding steps:

- ``generated_tokens`` is a **pool** shared by all samples of the call (every prompt, every one
  of its ``n``). Before each step, the tokens the live samples may emit in it (their demand: one
  each, more with speculative decoding; a sample still to be forked counts too) are compared with
  what is left of the pool; while the demand exceeds it, samples are stopped, the one with the
  most tokens first (ties: the later sample), by :func:`samples_to_stop`. So the call's generated
  tokens never exceed the pool, and a sample that ends early leaves its share to the others.
- ``flops``: the generator FLOPs the call may spend. The backend converts it into a token pool
  before the call (:func:`token_room`: the prefill of every prompt without cache hits, then every
  token at the longest context the call can reach) and takes the smaller of the two pools; once
  the FLOPs it has measured reach ``flops`` (a preemption's recomputation is not in the bound),
  every sample stops.
- ``deadline`` (``time.monotonic()`` seconds): at the first step boundary at or after it, every
  sample stops.

A sample stopped this way ends with ``finish_reason="length"`` and ``stop_reason="budget"``
(:data:`BUDGET_STOP`) and keeps the tokens it had; a sample stopped before its first token has
none. When not even the prompts' prefill fits the FLOP allowance, or the pool holds no token, the
backend runs nothing: every sample comes back empty with that reason, and no call is counted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from metagen.errors import InvalidParameterError
from metagen.types import Completion

BUDGET_STOP = "budget"  # the stop_reason of a sample the allowance ended


@dataclass(slots=True, frozen=True)
class Allowance:
    """Limits on one generate call; ``None`` means unlimited (see the module docstring)."""

    generated_tokens: int | None = None
    flops: float | None = None
    deadline: float | None = None

    def __post_init__(self) -> None:
        tokens = self.generated_tokens
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int)
                                   or tokens < 0):
            raise InvalidParameterError("generated_tokens", tokens,
                                        "must be a non-negative integer or None")
        for name in ("flops", "deadline"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))
                                      or not math.isfinite(value) or value < 0):
                raise InvalidParameterError(name, value,
                                            "must be a non-negative finite number or None")

    @property
    def unlimited(self) -> bool:
        """True when nothing is limited (the call runs as without an allowance)."""
        return self.generated_tokens is None and self.flops is None and self.deadline is None

    def expired(self, now: float | None = None) -> bool:
        """True once ``deadline`` has passed (``now``: ``time.monotonic()`` by default)."""
        if self.deadline is None:
            return False
        return (time.monotonic() if now is None else now) >= self.deadline


def budget_cut(completion: Completion) -> bool:
    """True when ``completion`` was ended by a call's allowance."""
    return completion.finish_reason == "length" and completion.stop_reason == BUDGET_STOP


def empty_cut() -> Completion:
    """A sample the allowance stopped before its first token."""
    return Completion(text="", finish_reason="length", stop_reason=BUDGET_STOP)


def samples_to_stop(lengths: Sequence[int], demands: Sequence[int], room: int) -> list[int]:
    """Indices of the live samples to stop so that the others' demands fit ``room``.

    ``lengths[i]`` is sample ``i``'s tokens so far and ``demands[i]`` the most it may emit in the
    next step; samples are listed in sample order. The sample with the most tokens goes first
    (ties: the later one), until the remaining demand is at most ``room``."""
    need = sum(demands)
    if need <= room:
        return []
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], -i))
    out = []
    for i in order:
        if need <= room:
            break
        out.append(i)
        need -= demands[i]
    return out


def token_room(flops: float, prefill_flops: float, token_flops: float) -> int:
    """Tokens a FLOP allowance pays for after the prefill: ``-1`` when not even the prefill
    fits, else ``floor((flops - prefill_flops) / token_flops)`` (``token_flops`` > 0 is the
    cost bound of one generated token)."""
    if flops < prefill_flops:
        return -1
    return int((flops - prefill_flops) // token_flops)
