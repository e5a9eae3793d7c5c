"""Parsers of the CLI's number flags: a malformed value is an ``InvalidParameterError`` naming the
parameter (printed as one line by ``metagen.cli.main``), never click's own usage error, so a flag
and the Python parameter it feeds fail alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from metagen.errors import InvalidParameterError


def int_flag(name: str, text: str | None) -> int | None:
    """A flag's integer value; a malformed one is an ``InvalidParameterError`` naming it."""
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        raise InvalidParameterError(name, text, "must be an integer") from None


def float_flag(name: str, text: str | None) -> float | None:
    """A flag's number value; a malformed one is an ``InvalidParameterError`` naming it."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        raise InvalidParameterError(name, text, "must be a number") from None


def parse_ns(text: str, name: str = "n") -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16), blanks dropped; a malformed list is an
    ``InvalidParameterError`` naming ``name`` (the checks of the values themselves are the
    config's)."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidParameterError(name, text, "must be comma-separated integers") from None


def key_values(entries: Sequence[str], name: str = "strategy_arg") -> dict[str, Any]:
    """``key=value`` entries (``--strategy-arg``); a value is read as JSON (numbers, true,
    null, lists) when it parses, else kept as a string. A malformed entry names ``name``."""
    out: dict[str, Any] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key.strip():
            raise InvalidParameterError(name, entry, "must be key=value")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def option_group(options: Sequence[Callable[[Any], Any]]) -> Callable[[Any], Any]:
    """A decorator that puts the click ``options`` on a command, in their listed order (the first
    listed is the first in ``--help``)."""

    def decorate(f: Any) -> Any:
        for option in reversed(options):
            f = option(f)
        return f

    return decorate
