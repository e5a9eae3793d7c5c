"""Load a local model folder with a named backend: the one loader of the CLI (``metagen
generate``, ``metagen eval``) and the demo.

Backends are looked up by name in :data:`BACKENDS` (each class has ``from_pretrained(path,
**options)``) and imported only when used, so asking what is installed loads neither the engine
nor transformers."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from typing import Any

from metagen.errors import InvalidParameterError, UnsupportedArchitectureError

# backend name -> (module, class); each class has from_pretrained(path, **options).
# "auto" tries them in this order and takes the first that implements the model's architecture.
BACKENDS: dict[str, tuple[str, str]] = {
    "local": ("metagen.generators.local", "LocalGenerator"),
    "hf": ("metagen.generators.hf", "HFGenerator"),
}


def available_backends() -> list[str]:
    """Backends whose module exists in this installation, in ``auto`` order."""
    return [name for name, (module, _) in BACKENDS.items()
            if importlib.util.find_spec(module) is not None]


def backend_class(name: str) -> Any:
    """The generator class of backend ``name`` (imported now)."""
    module, attr = BACKENDS[name]
    return getattr(importlib.import_module(module), attr)


def load_generator(backend: str, model: str, *, note: Callable[[str], None] | None = None,
                   **options: Any) -> tuple[str, Any]:
    """``(name, BACKENDS[name].from_pretrained(model, **options))``; options that are None are
    left out so each backend keeps its own defaults.

    ``backend="auto"`` takes the first available backend that implements the model: only an
    :class:`~metagen.errors.UnsupportedArchitectureError` (an architecture or format the engine
    lacks) moves on to the next one, saying so to ``note`` (when given). Any other load error --
    a corrupt file, a config that does not match its weights, an unavailable device -- is
    raised as is: another backend would only run the same broken checkpoint. A named backend is
    used or fails, never replaced; a name not installed raises ``InvalidParameterError``
    naming ``backend``.
    """
    names = available_backends()
    if backend != "auto" and backend not in names:
        raise InvalidParameterError("backend", backend,
                                    f"must be auto or one of {', '.join(names)}")
    kwargs = {k: v for k, v in options.items() if v is not None}
    candidates = names if backend == "auto" else [backend]
    for i, name in enumerate(candidates):
        try:
            return name, backend_class(name).from_pretrained(model, **kwargs)
        except UnsupportedArchitectureError as exc:
            if i + 1 == len(candidates):
                raise
            if note is not None:
                note(f"note: backend {name} cannot load this model ({exc}); "
                     f"using {candidates[i + 1]}")
    raise AssertionError("unreachable")


def engine_backend(backend: str, value: object, name: str = "quantization") -> str:
    """The backend that runs an engine-only option ``name`` set to ``value`` (``--quantization``,
    ``--deterministic``): the built-in engine (``auto`` becomes ``local``); transformers
    (``hf``) cannot, and raises :class:`~metagen.errors.InvalidParameterError` naming ``name``.
    ``value`` None: ``backend`` unchanged."""
    if value is None:
        return backend
    if backend == "hf":
        raise InvalidParameterError(name, value, "runs on the built-in engine: use --backend "
                                    "local (or auto)")
    return "local" if backend == "auto" else backend
