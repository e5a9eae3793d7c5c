"""What a strategy declares about itself (:class:`StrategySpec`), so that every surface — the
library, ``metagen generate --strategy``, ``metagen eval``, ``metagen serve`` — reads one record
instead of keeping its own list.

A spec names the library function and says:

- its ``family``: ``subsampled`` (sample N once, select: evaluated by subsampling one sample set),
  ``each_n`` (a search or sampler run afresh at each N), ``adaptive`` (draws at most N, stopping
  early), ``refinement`` (revises its own attempts, at most N);
- what it ``needs`` (a ``reward`` model, a ``prm``, a ``feedback`` function, or the policy's own
  ``confidence`` as reward) and what it can use when given (``optional``);
- how the scale N maps to its own knobs (``scale``: ``n -> {"width": ..., ...}``), so strategies
  are compared at roughly matched samples; explicit options override the derived ones;
- a typed ``config`` dataclass of the parameters a surface may set (defaults, bounds, choices,
  one line of documentation each, via :func:`param`): :meth:`StrategySpec.options` validates a
  mapping against it with errors naming the parameter;
- its ``label`` for tables, and the surfaces it cannot run on with the reason (``not_on``).

:meth:`StrategySpec.run` is one shape for every strategy — ``run(generator, prompt, n=...,
params=..., budget=..., scorers=..., options=...) -> Result`` — and :meth:`StrategySpec.selector`
builds the selector of a subsampled strategy. The registry (:mod:`metagen.strategies.registry`)
finds the specs: a module of this package that defines ``SPEC`` (or ``SPECS``) is registered.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from metagen.answers.key import AnswerKey
from metagen.errors import InvalidParameterError
from metagen.generators.base import Generator, Prompt
from metagen.strategies.budget import Budget
from metagen.types import Result, SamplingParams

Family = Literal["subsampled", "each_n", "adaptive", "refinement"]
FAMILIES: tuple[str, ...] = ("subsampled", "each_n", "adaptive", "refinement")
Need = Literal["reward", "prm", "feedback", "confidence"]
Surface = Literal["library", "cli", "eval", "serve", "openai"]
SURFACES: tuple[str, ...] = ("library", "cli", "eval", "serve", "openai")
SCALE = "n"  # the one knob every surface sets: samples (or attempts) at most, per prompt


def param(default: Any, doc: str, *, lo: float | None = None, hi: float | None = None,
          lo_open: bool = False, choices: tuple[Any, ...] | None = None) -> Any:
    """A config field: ``default`` (``None``: derived from N, or the library's own default),
    one line of ``doc``, bounds ``lo`` (exclusive when ``lo_open``) and ``hi`` inclusive, or
    the allowed ``choices``."""
    return field(default=default, metadata={"doc": doc, "lo": lo, "hi": hi, "lo_open": lo_open,
                                            "choices": choices})


@dataclass(frozen=True, slots=True)
class NoOptions:
    """A strategy without parameters beyond the scale N."""


@dataclass(frozen=True, slots=True)
class Scorers:
    """The scorers a run may read; a spec takes those it ``needs`` (and its ``optional`` ones
    when given). ``confidence`` is a reward model scoring the policy's confidence in a sample;
    ``answer_key`` groups answers for the strategies that vote."""

    reward: Any = None
    prm: Any = None
    feedback: Any = None
    confidence: Any = None
    answer_key: AnswerKey | None = None

    def get(self, need: str) -> Any:
        return getattr(self, need)


@dataclass(frozen=True, slots=True)
class ParamInfo:
    """One config field as surfaces show it: name, type text, default, doc, bounds, choices."""

    name: str
    type: str
    default: Any
    doc: str
    lo: float | None
    hi: float | None
    lo_open: bool
    choices: tuple[Any, ...] | None


SelectorFactory = Callable[[Any, "AnswerKey | None", Mapping[str, Any]], Any]


@dataclass(frozen=True)
class StrategySpec:
    """One strategy as every surface sees it (see the module docstring).

    ``scorer_args`` maps each need to the library function's keyword that takes it
    (``{"prm": "value"}`` for tree of thoughts); ``selector`` (subsampled family) builds the
    selector from the scorer it needs, the answer key and the options; ``requires`` names the
    generator capabilities it relies on (``logprobs``, ``top_logprobs``); ``not_on`` maps a
    surface to the reason it cannot run there."""

    name: str
    function: Callable[..., Any]
    family: Family
    label: str
    config: type = NoOptions
    scale: Callable[[int], Mapping[str, Any]] = lambda n: {SCALE: n}
    needs: frozenset[str] = frozenset()
    optional: frozenset[str] = frozenset()
    scorer_args: Mapping[str, str] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    selector_factory: SelectorFactory | None = None
    requires: frozenset[str] = frozenset()
    not_on: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise InvalidParameterError("family", self.family, f"must be one of {FAMILIES}")
        if (self.family == "subsampled") != (self.selector_factory is not None):
            raise InvalidParameterError("selector_factory", self.name,
                                        "a subsampled strategy has a selector; others none")
        for need in self.needs | self.optional:
            if need not in self.scorer_args:
                raise InvalidParameterError("scorer_args", need, f"{self.name} reads {need} "
                                            "but names no keyword for it")
        for surface in self.not_on:
            if surface not in SURFACES:
                raise InvalidParameterError("not_on", surface, f"must be among {SURFACES}")
        if not dataclasses.is_dataclass(self.config):
            raise InvalidParameterError("config", self.config, "must be a dataclass")

    @property
    def summary(self) -> str:
        """The first paragraph of the library function's docstring, on one line."""
        return " ".join((inspect.getdoc(self.function) or "").split("\n\n")[0].split())

    @cached_property
    def _accepts(self) -> frozenset[str]:
        return frozenset(inspect.signature(self.function).parameters)

    def params(self) -> list[ParamInfo]:
        """The config's fields, in declaration order."""
        hints = typing.get_type_hints(self.config)
        out = []
        for f in dataclasses.fields(self.config):
            meta = f.metadata
            out.append(ParamInfo(f.name, _type_text(hints[f.name]), f.default,
                                 meta.get("doc", ""), meta.get("lo"), meta.get("hi"),
                                 bool(meta.get("lo_open")), meta.get("choices")))
        return out

    def options(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` checked against the config: each key a field, each value of the field's
        type (an int is a float too), within its bounds or among its choices. Only the given
        keys are returned: the derived and library defaults stay in charge of the rest.
        Raises ``InvalidParameterError`` naming the key at fault."""
        fields = {f.name: f for f in dataclasses.fields(self.config)}
        hints = typing.get_type_hints(self.config)
        out: dict[str, Any] = {}
        for key, value in values.items():
            if key not in fields:
                raise InvalidParameterError(key, value, f"is not a parameter of {self.name}; "
                                            f"known: {sorted(fields) or 'none'}")
            out[key] = _check_value(key, value, hints[key], fields[key].metadata)
        return out

    def kwargs(self, n: int, options: Mapping[str, Any]) -> dict[str, Any]:
        """The library keywords at scale ``n``: the spec's fixed ``defaults``, the derived
        knobs, then the checked ``options`` over them."""
        _positive_n(n)
        return {**self.defaults, **self.scale(n), **self.options(options)}

    def missing(self, scorers: Scorers) -> list[str]:
        """The needs ``scorers`` lacks."""
        return sorted(need for need in self.needs if scorers.get(need) is None)

    def run(self, generator: Generator, prompt: Prompt, *, n: int,
            params: SamplingParams | None = None, budget: Budget | None = None,
            scorers: Scorers = Scorers(), options: Mapping[str, Any] | None = None) -> Result:
        """One run on one prompt at scale ``n``: the library function called with the derived
        knobs and ``options``, the scorers it needs and uses, the answer key when it votes.
        Raises ``InvalidParameterError`` naming the missing scorer or a bad option."""
        kwargs = self.kwargs(n, options or {})
        lacking = self.missing(scorers)
        if lacking:
            raise InvalidParameterError(lacking[0], None, f"{self.name} needs a {lacking[0]}")
        for need in sorted(self.needs | self.optional):
            if scorers.get(need) is not None:
                kwargs[self.scorer_args[need]] = scorers.get(need)
        if scorers.answer_key is not None and "answer_key" in self._accepts:
            kwargs.setdefault("answer_key", scorers.answer_key)
        if budget is not None:
            kwargs["budget"] = budget
        out = self.function(generator, [prompt], params=params, **kwargs)
        result = out[0] if isinstance(out, list) else out
        assert isinstance(result, Result)
        return result

    def selector(self, scorer: Any, answer_key: AnswerKey | None,
                 options: Mapping[str, Any]) -> Any:
        """The selector of a subsampled strategy over ``scorer`` (its need's scorer, or None),
        with ``options`` checked against the config."""
        if self.selector_factory is None:
            raise InvalidParameterError("strategy", self.name, "is not a subsampled strategy")
        return self.selector_factory(scorer, answer_key, self.options(options))

    def available(self, surface: str) -> bool:
        return surface not in self.not_on


def _positive_n(n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise InvalidParameterError(SCALE, n, "must be a positive integer")


def _type_text(hint: Any) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is Literal:
        return "|".join(str(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    return getattr(hint, "__name__", str(hint))


def _accepts_type(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_type(value, a) for a in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    return True


def _check_value(key: str, value: Any, hint: Any, meta: Mapping[str, Any]) -> Any:
    if not _accepts_type(value, hint):
        raise InvalidParameterError(key, value, f"must be {_type_text(hint)}")
    if value is None:
        return value
    choices = meta.get("choices")
    if choices is not None and value not in choices:
        raise InvalidParameterError(key, value, f"must be one of {list(choices)}")
    lo, hi, lo_open = meta.get("lo"), meta.get("hi"), meta.get("lo_open")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if lo is not None and (value <= lo if lo_open else value < lo):
            raise InvalidParameterError(key, value, f"must be {'>' if lo_open else '>='} {lo}")
        if hi is not None and value > hi:
            raise InvalidParameterError(key, value, f"must be <= {hi}")
    return value
