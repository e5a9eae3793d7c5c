"""The server's own policy on a strategy request: upper bounds on its work, whatever the strategy.

The library validates a strategy's parameters (:meth:`StrategySpec.options`); the server only
bounds how much one request may ask for, the same way for every registered strategy:

- the scale ``metagen.n`` is at most ``MAX_STRATEGY_N``;
- every integer option is at most ``MAX_SEARCH_SIZE`` (width, branching, depth, batch, ...),
  except a token count (an option whose name ends in ``_tokens``), which the token bound below
  covers and the library checks against the model;
- one generate call samples at most ``MAX_STRATEGY_N`` completions (prompts x ``n``): a request
  whose knobs multiply past it (``width 64 x branching 64``) is a 400 naming the largest knob it
  set, before any model call where the first call is the one (:func:`check_call`);
- the run's budget generates at most ``MAX_SEARCH_SAMPLES`` x the request's ``max_tokens``
  tokens and makes at most ``MAX_SEARCH_SAMPLES`` generate calls, the tighter of that and the
  client's ``metagen.budget`` (:func:`policy_budget`): a run that reaches it stops with the best
  answer so far (``stopped_by_budget``), so no strategy does unbounded work whatever its knobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.server.errors import bad_request
from metagen.strategies.budget import Budget

MAX_STRATEGY_N = 256  # metagen.n, and the samples of one generate call
MAX_SEARCH_SIZE = 64  # every integer option (width, branching, max_depth, ...)
_DEFAULT_DEPTH = 16
# a whole run: the largest per-call count for the library's default number of steps
MAX_SEARCH_SAMPLES = MAX_STRATEGY_N * _DEFAULT_DEPTH
_TOKEN_COUNT = "_tokens"


class TooManySamples(InvalidParameterError):
    """A generate call of a strategy asks for more than ``MAX_STRATEGY_N`` samples."""

    def __init__(self, samples: int) -> None:
        super().__init__("n", samples, f"at most {MAX_STRATEGY_N} samples per generate call on "
                         "this server")
        self.samples = samples


def check_options(options: Mapping[str, Any]) -> None:
    """A 400 naming the first integer option over ``MAX_SEARCH_SIZE`` (token counts exempt)."""
    for key, value in options.items():
        if (isinstance(value, int) and not isinstance(value, bool)
                and not key.endswith(_TOKEN_COUNT) and value > MAX_SEARCH_SIZE):
            raise bad_request(f"metagen.{key}", f"metagen.{key} = {value}: at most "
                              f"{MAX_SEARCH_SIZE} on this server")


def check_call(samples: int) -> None:
    """Raise :class:`TooManySamples` when one generate call asks for more than
    ``MAX_STRATEGY_N`` samples."""
    if samples > MAX_STRATEGY_N:
        raise TooManySamples(samples)


def policy_budget(budget: Budget | None, max_tokens: int) -> Budget:
    """``budget`` (the client's, or none) within the server's bound for samples of
    ``max_tokens`` tokens each (see the module docstring)."""
    b = budget or Budget()
    cap = MAX_SEARCH_SAMPLES * max_tokens
    tokens = cap if b.max_generated_tokens is None else min(b.max_generated_tokens, cap)
    calls = MAX_SEARCH_SAMPLES if b.max_calls is None else min(b.max_calls, MAX_SEARCH_SAMPLES)
    return Budget(tokens, b.max_flops, calls, b.max_seconds)
