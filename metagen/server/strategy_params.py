"""The ``metagen`` object of a request body, validated into a :class:`StrategyRequest`.

Every strategy takes ``strategy``, ``budget`` (``{"max_tokens": int, "max_seconds": number}``,
both optional, as :class:`~metagen.strategies.budget.Budget`) and ``return`` (``"candidates"``:
every candidate's text and score; ``"tree"``: the library's ``Result.trace``, the search tree of a
step search); the old ``return_candidates: true`` is ``return: "candidates"``. The parallel
strategies take ``n``. Their own parameters:

- ``best_of_n``: ``reward`` (an ORM name; may be left out when exactly one is loaded);
- ``self_consistency``: nothing more (majority vote over the samples' answers);
- ``weighted_vote``: ``reward`` (an ORM name or ``"logprob"``; default the sole ORM, else
  ``"logprob"``), ``aggregate`` (``sum`` | ``mean``), ``keep_top`` (a fraction in (0, 1]);
- ``mbr``: ``utility`` (``answer`` | ``chrf`` | ``bleu`` | ``rouge``), ``weighting``
  (``uniform`` | ``logprob``), ``method`` (``exact`` | ``aggregate`` | ``prune``);
- ``step_beam_search``: ``prm`` (a PRM name from ``--prm``; may be left out when exactly one is
  loaded), ``width``, ``branching``, ``max_depth`` (positive integers), ``select``
  (``score`` | ``vote`` | ``weighted_vote``). The knobs multiply: a search step samples
  ``width x branching`` completions (the first from the prompt, later ones ``branching`` per live
  beam), at most ``MAX_STRATEGY_N`` (a parallel strategy's largest ``n``), and the search makes
  up to ``max_depth`` steps: ``width x branching x max_depth`` is at most ``MAX_SEARCH_SAMPLES``.

Anything else is a 400 naming the field (``metagen.strategy``, ``metagen.<name>``,
``metagen.budget.<name>``), raised before any model call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metagen.server.errors import bad_request
from metagen.strategies.budget import Budget

MAX_STRATEGY_N = 256
MAX_SEARCH_SIZE = 64  # width, branching, max_depth
_DEFAULT_DEPTH = 16
# samples of a whole search: the largest per-step count for the default number of steps
MAX_SEARCH_SAMPLES = MAX_STRATEGY_N * _DEFAULT_DEPTH
_COMMON = frozenset({"strategy", "budget", "return", "return_candidates"})
_PARALLEL = _COMMON | {"n"}
# strategy -> the keys its ``metagen`` object may hold
STRATEGY_FIELDS: dict[str, frozenset[str]] = {
    "best_of_n": _PARALLEL | {"reward"},
    "self_consistency": _PARALLEL,
    "weighted_vote": _PARALLEL | {"reward", "aggregate", "keep_top"},
    "mbr": _PARALLEL | {"utility", "weighting", "method"},
    "step_beam_search": _COMMON | {"prm", "width", "branching", "max_depth", "select"},
}
_CHOICES: dict[str, tuple[str, ...]] = {
    "aggregate": ("sum", "mean"), "utility": ("answer", "chrf", "bleu", "rouge"),
    "weighting": ("uniform", "logprob"), "method": ("exact", "aggregate", "prune"),
    "select": ("score", "vote", "weighted_vote"), "return": ("candidates", "tree"),
}
_SEARCH_INTS = {"width": 4, "branching": 4, "max_depth": _DEFAULT_DEPTH}


@dataclass(slots=True, frozen=True)
class StrategyRequest:
    """A validated ``metagen`` object: the strategy, its sample count (parallel strategies),
    the scorer's name (``reward``: an ORM or ``"logprob"``; ``prm``), the library keyword
    arguments specific to the strategy, the budget and what to return."""

    strategy: str
    n: int = 16
    reward: str | None = None
    prm: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    budget: Budget | None = None
    returns: str | None = None


def _int(value: Any, name: str, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= hi:
        raise bad_request(f"metagen.{name}", f"metagen.{name} must be an integer in [1, {hi}]")
    return value


def _check_search_work(width: int, branching: int, max_depth: int) -> None:
    """A 400 naming the knobs whose product is over its cap (see the module docstring)."""
    per_step = width * branching
    if per_step > MAX_STRATEGY_N:
        raise bad_request("metagen.width", f"metagen.width x metagen.branching = {width} x "
                          f"{branching} = {per_step} samples per search step; at most "
                          f"{MAX_STRATEGY_N}")
    if per_step * max_depth > MAX_SEARCH_SAMPLES:
        raise bad_request("metagen.max_depth", f"metagen.width x metagen.branching x "
                          f"metagen.max_depth = {width} x {branching} x {max_depth} = "
                          f"{per_step * max_depth} samples in the search; at most "
                          f"{MAX_SEARCH_SAMPLES}")


def _choice(value: Any, name: str) -> str:
    if value not in _CHOICES[name]:
        raise bad_request(f"metagen.{name}", f"metagen.{name} must be one of "
                          f"{list(_CHOICES[name])}")
    return str(value)


def _named(value: Any, name: str, loaded: Mapping[str, Any], option: str,
           extra: tuple[str, ...] = ()) -> str:
    if value is None and len(loaded) == 1 and not extra:
        value = next(iter(loaded))
    if not isinstance(value, str) or (value not in loaded and value not in extra):
        known = sorted(loaded) + list(extra) or f"none (start the server with {option} NAME=PATH)"
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
        return _choice(value["return"], "return")
    return "candidates" if candidates else None


def parse_strategy(value: Any, rewards: Mapping[str, Any],
                   prms: Mapping[str, Any] | None = None) -> StrategyRequest:
    """The ``metagen`` object of a body, or a 400 naming the field at fault (see the module
    docstring); ``rewards`` / ``prms`` are the loaded scorers by name."""
    if not isinstance(value, dict):
        raise bad_request("metagen", "metagen must be an object naming a strategy")
    name = value.get("strategy")
    if name not in STRATEGY_FIELDS:
        raise bad_request("metagen.strategy", f"unknown strategy {str(name)[:40]!r}; known: "
                          f"{sorted(STRATEGY_FIELDS)}")
    allowed = STRATEGY_FIELDS[name]
    unknown = sorted(k for k in value if k not in allowed)
    if unknown:
        raise bad_request(f"metagen.{unknown[0][:40]}", f"unknown {name} parameter(s) "
                          f"{', '.join(repr(k[:40]) for k in unknown[:10])}; known: "
                          f"{sorted(allowed - {'strategy'})}")
    n = _int(value.get("n", 16), "n", MAX_STRATEGY_N)
    options: dict[str, Any] = {k: _choice(value[k], k) for k in
                               ("aggregate", "utility", "weighting", "method", "select")
                               if k in value}
    reward = prm = None
    if name == "best_of_n":
        reward = _named(value.get("reward"), "reward", rewards, "--orm")
    elif name == "weighted_vote":
        default = next(iter(rewards)) if len(rewards) == 1 else "logprob"
        reward = _named(value.get("reward", default), "reward", rewards, "--orm", ("logprob",))
        if "keep_top" in value:
            keep = value["keep_top"]
            if (not isinstance(keep, (int, float)) or isinstance(keep, bool)
                    or not 0 < keep <= 1):
                raise bad_request("metagen.keep_top", "metagen.keep_top must be in (0, 1]")
            options["keep_top"] = float(keep)
    elif name == "step_beam_search":
        prm = _named(value.get("prm"), "prm", prms or {}, "--prm")
        options |= {k: _int(value.get(k, d), k, MAX_SEARCH_SIZE) for k, d in _SEARCH_INTS.items()}
        _check_search_work(options["width"], options["branching"], options["max_depth"])
    return StrategyRequest(name, n, reward, prm, options, parse_budget(value.get("budget")),
                           _returns(value))
