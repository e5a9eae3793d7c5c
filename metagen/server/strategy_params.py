"""The ``metagen`` object of a request body, validated into a :class:`StrategyRequest`, from the
strategy registry (:mod:`metagen.strategies.registry`): the server keeps no list of strategies
or of their parameters.

``strategy`` is any registered strategy available on ``serve`` (its spec's ``not_on`` does not
name ``serve``; asking for one that does is a 400 naming ``metagen.strategy`` with the spec's
reason). Every strategy takes:

- ``n``: the scale N (default 16), which the spec maps to the strategy's own knobs (samples of a
  parallel strategy, samples per step of a beam search, iterations of MCTS, attempts of
  self-refine, ...);
- ``budget``: ``{"max_tokens": int, "max_seconds": number}``, both optional, as
  :class:`~metagen.strategies.budget.Budget`;
- ``return``: ``"candidates"`` (every candidate's text and score) or ``"tree"`` (the library's
  ``Result.trace``: the search tree of a step search); the old ``return_candidates: true`` is
  ``return: "candidates"``;
- the scorers it needs or can use, by the name they were loaded under: ``reward`` (an ORM from
  ``--orm``; may be left out when exactly one is loaded; a strategy that can do without one
  takes ``"logprob"`` for none, its library default, e.g. weighted_vote weighing by the samples'
  log-probabilities, and defaults to it unless exactly one ORM is loaded) and ``prm`` (a PRM
  from ``--prm``; may be left out when exactly one is loaded);
- the fields of the spec's config (its parameters besides N), checked by
  :meth:`~metagen.strategies.spec.StrategySpec.options`: the library's refusal becomes a 400
  naming ``metagen.<param>``.

Then the server's own bounds on the work (:mod:`metagen.server.strategy_policy`). Anything else
is a 400 naming the field (``metagen.strategy``, ``metagen.<name>``, ``metagen.budget.<name>``),
raised before any model call; an unknown field's message lists the strategy's known ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.server.errors import bad_request
from metagen.server.strategy_policy import MAX_STRATEGY_N, check_options
from metagen.strategies import registry
from metagen.strategies.budget import Budget
from metagen.strategies.spec import StrategySpec

SURFACE = "serve"
DEFAULT_N = 16
COMMON = frozenset({"strategy", "n", "budget", "return", "return_candidates"})
SCORERS = {"reward": "--orm", "prm": "--prm"}  # what a request can name -> the serve option
NO_REWARD = "logprob"  # an optional reward left out: the library's default
RETURNS = ("candidates", "tree")


@dataclass(slots=True, frozen=True)
class StrategyRequest:
    """A validated ``metagen`` object: the strategy, its scale N, the scorers' names
    (``reward``: an ORM or ``"logprob"``; ``prm``), the config options the request set, the
    budget and what to return."""

    strategy: str
    n: int = DEFAULT_N
    reward: str | None = None
    prm: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    budget: Budget | None = None
    returns: str | None = None

    @property
    def spec(self) -> StrategySpec:
        return registry.get(self.strategy)


def config_fields(spec: StrategySpec) -> frozenset[str]:
    """The names of ``spec``'s config fields."""
    return frozenset(f.name for f in dataclasses.fields(spec.config))


def scorer_fields(spec: StrategySpec) -> frozenset[str]:
    """The scorer names a request for ``spec`` may set (those it needs or can use)."""
    return frozenset(need for need in spec.needs | spec.optional if need in SCORERS)


def request_fields(spec: StrategySpec) -> frozenset[str]:
    """Every key a ``metagen`` object for ``spec`` may hold."""
    return COMMON | scorer_fields(spec) | config_fields(spec)


def serve_spec(name: Any) -> StrategySpec:
    """The spec of the strategy ``name``, or a 400 naming ``metagen.strategy``: unknown, not
    available on serve (with the spec's reason), or needing a scorer the server cannot load."""
    found = registry.specs().get(name) if isinstance(name, str) else None
    if found is None:
        raise bad_request("metagen.strategy", f"unknown strategy {str(name)[:40]!r}; known: "
                          f"{sorted(registry.names(SURFACE))}")
    if not found.available(SURFACE):
        raise bad_request("metagen.strategy", f"{name} is not available on metagen serve: "
                          f"{found.not_on[SURFACE]}")
    lacking = sorted(found.needs - set(SCORERS))
    if lacking:
        raise bad_request("metagen.strategy", f"{name} needs a {lacking[0]}, which metagen "
                          "serve cannot provide")
    return found


def _int(value: Any, name: str, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi:
        raise bad_request(f"metagen.{name}", f"metagen.{name} must be an integer in [1, {hi}]")
    return value


def _named(value: Any, name: str, loaded: Mapping[str, Any], required: bool) -> str:
    """The loaded scorer ``value`` names (``"logprob"`` too when not ``required``)."""
    if value is None:
        value = next(iter(loaded)) if len(loaded) == 1 else (None if required else NO_REWARD)
    extra = () if required else (NO_REWARD,)
    if not isinstance(value, str) or (value not in loaded and value not in extra):
        known = (sorted(loaded) + list(extra)
                 or f"none (start the server with {SCORERS[name]} NAME=PATH)")
        raise bad_request(f"metagen.{name}", f"unknown {name} {str(value)[:40]!r}; "
                          f"loaded: {known}")
    return value


def parse_budget(value: Any) -> Budget | None:
    """``{"max_tokens": int, "max_seconds": number}`` (both optional) -> :class:`Budget`."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("metagen.budget", "metagen.budget must be an object")
    unknown = sorted(k for k in value if k not in ("max_tokens", "max_seconds"))
    if unknown:
        raise bad_request(f"metagen.budget.{unknown[0][:40]}", "unknown budget field; known: "
                          "['max_seconds', 'max_tokens']")
    tokens, seconds = value.get("max_tokens"), value.get("max_seconds")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool)
                               or tokens < 1):
        raise bad_request("metagen.budget.max_tokens", "must be a positive integer")
    if seconds is not None and (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                                or not math.isfinite(seconds) or seconds <= 0):
        raise bad_request("metagen.budget.max_seconds", "must be a positive number")
    return Budget(max_generated_tokens=tokens, max_seconds=seconds)


def _returns(value: Mapping[str, Any]) -> str | None:
    candidates = value.get("return_candidates", False)
    if not isinstance(candidates, bool):
        raise bad_request("metagen.return_candidates", "return_candidates must be true or false")
    if value.get("return") is not None:
        if value["return"] not in RETURNS:
            raise bad_request("metagen.return", f"metagen.return must be one of {list(RETURNS)}")
        return str(value["return"])
    return "candidates" if candidates else None


def _options(spec: StrategySpec, value: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields ``value`` sets, as the library checks them, within the server's
    bounds."""
    given = {k: v for k, v in value.items() if k in config_fields(spec)}
    try:
        options = spec.options(given)
    except InvalidParameterError as exc:
        wire = f"metagen.{exc.param}"
        raise bad_request(wire, str(exc).replace(f"invalid {exc.param}=", f"invalid {wire}=",
                                                 1)) from None
    check_options(options)
    return options


def parse_strategy(value: Any, rewards: Mapping[str, Any],
                   prms: Mapping[str, Any] | None = None) -> StrategyRequest:
    """The ``metagen`` object of a body, or a 400 naming the field at fault (see the module
    docstring); ``rewards`` / ``prms`` are the loaded scorers by name."""
    if not isinstance(value, dict):
        raise bad_request("metagen", "metagen must be an object naming a strategy")
    name = value.get("strategy")
    spec = serve_spec(name)
    allowed = request_fields(spec)
    unknown = sorted(k for k in value if k not in allowed)
    if unknown:
        raise bad_request(f"metagen.{unknown[0][:40]}", f"unknown {name} parameter(s) "
                          f"{', '.join(repr(k[:40]) for k in unknown[:10])}; known: "
                          f"{sorted(allowed - {'strategy'})}")
    n = _int(value.get("n", DEFAULT_N), "n", MAX_STRATEGY_N)
    loaded = {"reward": rewards, "prm": prms or {}}
    names = {need: _named(value.get(need), need, loaded[need], need in spec.needs)
             for need in sorted(scorer_fields(spec))}
    return StrategyRequest(spec.name, n, names.get("reward"), names.get("prm"),
                           _options(spec, value), parse_budget(value.get("budget")),
                           _returns(value))
