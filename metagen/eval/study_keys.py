"""Reading a study file's values by their dotted key path (``runs[1].strategies[0].args.width``):
every refusal is an ``InvalidParameterError`` whose ``param`` is the path of the key at fault.

- :func:`at` re-raises an ``InvalidParameterError`` raised inside it under a key path (the
  error's own ``param`` mapped through ``rename``, or appended to the path);
- :func:`mapping`, :func:`items`, :func:`text`, :func:`integer`, :func:`number`, :func:`flag`
  read one value of one type, refusing anything else (a YAML ``4`` is not a string, ``true`` is
  not an integer);
- :func:`known_keys` refuses a key the mapping may not have, naming the keys it may.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from metagen.errors import InvalidParameterError


def join(path: str, key: str | int) -> str:
    """``path`` and one more key: ``join("runs", 1)`` -> ``runs[1]``, ``join("runs[1]", "n")``
    -> ``runs[1].n``, ``join("", "n")`` -> ``n``."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


@contextlib.contextmanager
def at(path: str, rename: Mapping[str, str] | None = None) -> Iterator[None]:
    """Re-raise an ``InvalidParameterError`` from the block naming ``rename[param]`` when its
    ``param`` is there, else ``path.param`` (``path`` alone when ``param`` is empty)."""
    try:
        yield
    except InvalidParameterError as exc:
        key = (rename or {}).get(exc.param) or (join(path, exc.param) if exc.param else path)
        raise InvalidParameterError(key, exc.value, exc.reason) from None


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    """``value`` when it is a mapping with string keys."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidParameterError(path, value, "must be a mapping of names to values")
    return value


def items(value: Any, path: str, *, empty: bool = False) -> list[Any]:
    """``value`` when it is a list (non-empty unless ``empty``)."""
    if not isinstance(value, list) or (not value and not empty):
        raise InvalidParameterError(path, value, "must be a list" + ("" if empty
                                                                     else " of one or more"))
    return value


def text(value: Any, path: str) -> str:
    """``value`` when it is a non-blank string."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidParameterError(path, value, "must be a non-empty string")
    return value


def integer(value: Any, path: str, minimum: int = 0) -> int:
    """``value`` when it is an integer (not a bool) of at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise InvalidParameterError(path, value, f"must be an integer >= {minimum}")
    return value


def number(value: Any, path: str) -> float:
    """``value`` when it is a number (not a bool), as a float."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidParameterError(path, value, "must be a number")
    return float(value)


def flag(value: Any, path: str) -> bool:
    """``value`` when it is true or false."""
    if not isinstance(value, bool):
        raise InvalidParameterError(path, value, "must be true or false")
    return value


def known_keys(values: Mapping[str, Any], path: str, known: Collection[str],
               required: Collection[str] = ()) -> None:
    """Refuse a key of ``values`` not in ``known`` (naming it and the known ones) and a
    ``required`` key it lacks (naming it)."""
    for key in values:
        if key not in known:
            raise InvalidParameterError(join(path, key), values[key], "is not a key here; "
                                        f"known: {', '.join(sorted(known))}")
    for key in required:
        if key not in values:
            raise InvalidParameterError(join(path, key), None, "is required")
