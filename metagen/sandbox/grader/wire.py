"""A strict typed encoding of primitive values, one line of JSON per value.

Only these exact types cross (no subclasses): ``int``, ``float`` (nan and infinities too),
``str``, ``bool``, ``None``, ``bytes``, ``list``, ``tuple``, ``dict``, ``set``, ``frozenset``.
Tuples stay tuples, sets stay sets; an object whose ``==`` always answers True is not one of
them, so :func:`dumps` refuses it. Every value is a tagged JSON array::

    ["i", "-1f"]  int (hex: no digit limit)   ["f", "0x1.8p+1"]  float (float.hex, exact)
    ["s", "text"]  ["b", true]  ["n"]  ["y", "00ff"]  bytes (hex)
    ["l", [...]]  ["t", [...]]  ["S", [...]]  ["F", [...]]  list, tuple, set, frozenset
    ["d", [[k, v], ...]]  dict (insertion order; keys any hashable primitive)

:func:`loads` validates everything it reads (it parses untrusted text) and raises
:class:`WireError` for anything that is not exactly such a value. Sets, and with
``canonical=True`` dicts, are written in a fixed order, so equal values of the same types give
equal text. Nesting deeper than :data:`MAX_DEPTH` is refused both ways.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 100
_INT = re.compile(r"-?[0-9a-f]+\Z")
_BYTES = re.compile(r"(?:[0-9a-f]{2})*\Z")
_SEQUENCES: dict[type, str] = {list: "l", tuple: "t", set: "S", frozenset: "F"}
_MAKERS: dict[str, Any] = {"l": list, "t": tuple, "S": set, "F": frozenset}


class WireError(ValueError):
    """A value that is not an exact primitive, or text that is not a valid encoding."""


def dumps(value: Any, *, canonical: bool = False) -> str:
    """The one-line encoding of ``value``; :class:`WireError` for a non-primitive value."""
    return json.dumps(_tree(value, canonical, 0), separators=(",", ":"))


def loads(text: str | bytes) -> Any:
    """The value ``text`` encodes; :class:`WireError` when it is not exactly an encoding."""
    try:
        tree = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise WireError(f"not JSON: {exc}") from None
    return _value(tree, 0)


def _tree(v: Any, canonical: bool, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH}")
    t = type(v)
    if t is bool:
        return ["b", v]
    if t is int:
        return ["i", format(v, "x")]
    if t is float:
        return ["f", v.hex()]
    if t is str:
        return ["s", v]
    if v is None:
        return ["n"]
    if t is bytes:
        return ["y", v.hex()]
    if t in _SEQUENCES:
        items = [_tree(x, canonical, depth + 1) for x in v]
        if t in (set, frozenset):
            items.sort(key=_key)
        return [_SEQUENCES[t], items]
    if t is dict:
        pairs = [[_tree(k, canonical, depth + 1), _tree(x, canonical, depth + 1)]
                 for k, x in v.items()]
        if canonical:
            pairs.sort(key=lambda p: _key(p[0]))
        return ["d", pairs]
    raise WireError(f"{t.__module__}.{t.__qualname__} is not a primitive value")


def _key(tree: Any) -> str:
    return json.dumps(tree, separators=(",", ":"))


def _value(tree: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"nested deeper than {MAX_DEPTH}")
    if type(tree) is not list or not tree or type(tree[0]) is not str:
        raise WireError(f"not a tagged value: {str(tree)[:80]}")
    tag, rest = tree[0], tree[1:]
    if tag == "n" and not rest:
        return None
    if len(rest) != 1:
        raise WireError(f"tag {tag!r} takes one payload")
    p = rest[0]
    t = type(p)
    if tag == "b" and t is bool:
        return p
    if tag == "i" and t is str and _INT.match(p):
        return int(p, 16)
    if tag == "f" and t is str:
        try:
            return float.fromhex(p)
        except ValueError:
            raise WireError(f"bad float {p[:40]!r}") from None
    if tag == "s" and t is str:
        return p
    if tag == "y" and t is str and _BYTES.match(p):
        return bytes.fromhex(p)
    if tag in _MAKERS and t is list:
        items = [_value(x, depth + 1) for x in p]
        try:
            made = _MAKERS[tag](items)
        except TypeError as exc:  # an unhashable set element
            raise WireError(str(exc)) from None
        if len(made) != len(items):
            raise WireError("a set holds a value twice")
        return made
    if tag == "d" and t is list:
        out = {}
        for pair in p:
            if type(pair) is not list or len(pair) != 2:
                raise WireError("a dict entry must be a [key, value] pair")
            try:
                out[_value(pair[0], depth + 1)] = _value(pair[1], depth + 1)
            except TypeError as exc:  # an unhashable key
                raise WireError(str(exc)) from None
        if len(out) != len(p):
            raise WireError("a dict holds a key twice")
        return out
    raise WireError(f"bad payload for tag {tag!r}: {str(p)[:80]}")
