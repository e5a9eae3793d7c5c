"""The strategy registry: every strategy's :class:`~metagen.strategies.spec.StrategySpec`, found
by walking this package once, on first use.

A module of ``metagen.strategies`` that defines ``SPEC`` (one spec) or ``SPECS`` (several) is
registered; nothing else lists strategies. So a new strategy is one module: its function, its
config and its ``SPEC``; ``metagen eval``, ``metagen serve``, ``metagen generate --strategy``,
the package exports and the README's table then know it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.strategies.spec import StrategySpec

_SPECS: dict[str, StrategySpec] | None = None


def _discover() -> dict[str, StrategySpec]:
    import metagen.strategies as package

    from metagen.strategies.spec import FAMILIES

    found: dict[str, StrategySpec] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        specs = list(getattr(module, "SPECS", ()))
        if isinstance(getattr(module, "SPEC", None), StrategySpec):
            specs.insert(0, module.SPEC)
        for spec in specs:
            if spec.name in found:
                raise InvalidParameterError("name", spec.name, f"registered twice (again in "
                                            f"{module.__name__})")
            found[spec.name] = spec
    order = list(found)
    return {s.name: s for s in sorted(found.values(), key=lambda s: (
        FAMILIES.index(s.family), order.index(s.name)))}


def specs() -> dict[str, StrategySpec]:
    """Every registered strategy by name: by family (subsampled, each_n, adaptive, refinement),
    then in module order (each module's specs in its order)."""
    global _SPECS
    if _SPECS is None:
        _SPECS = _discover()
    return _SPECS


def get(name: str) -> StrategySpec:
    """The spec of ``name``; ``InvalidParameterError`` naming ``strategy`` with the known
    names otherwise."""
    found = specs().get(name) if isinstance(name, str) else None
    if found is None:
        raise InvalidParameterError("strategy", name, f"must be one of {', '.join(specs())}")
    return found


def names(surface: str | None = None, family: str | None = None) -> tuple[str, ...]:
    """Registered names, those available on ``surface`` and of ``family`` when given."""
    return tuple(name for name, spec in specs().items()
                 if (surface is None or spec.available(surface))
                 and (family is None or spec.family == family))


def strategy_exports() -> dict[str, Callable[..., Any]]:
    """Export name -> library function of every registered strategy (``metagen`` and
    ``metagen.strategies`` export them all)."""
    return {spec.function.__name__: spec.function for spec in specs().values()}
