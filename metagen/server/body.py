"""Reading a request body: size-capped, depth-limited, strict JSON (V20, S3, S6).

The standard library parser accepts ``NaN`` / ``Infinity`` and turns ``1e400`` into ``inf``, and
recurses once per nesting level; a server built on it answers such bodies with a 500 or a reset.
Here each of them is a 400 naming the problem: non-finite numbers are refused, nesting deeper than
the cap is refused before parsing (strings are skipped when counting brackets), integers too long
to convert are refused, and the top level must be an object.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import AsyncIterator
from typing import Any

from metagen.server.errors import ApiError, bad_request

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


async def read_capped(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The whole body, or 413 as soon as more than ``limit`` bytes arrived (the rest is never
    buffered)."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        parts.append(chunk)
    return b"".join(parts)


def too_large(limit: int) -> ApiError:
    return ApiError(413, f"request body exceeds the limit of {limit} bytes",
                    code="request_too_large")


def json_depth(raw: bytes) -> int:
    """Deepest nesting of arrays/objects in ``raw`` (brackets inside strings do not count)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b'""', raw)):
        depth += 1 if match.group() in (b"[", b"{") else -1
        deepest = max(deepest, depth)
    return deepest


def _refuse_constant(name: str) -> Any:
    raise bad_request(None, f"invalid JSON body: {name} is not a valid JSON number",
                      code="invalid_json")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise bad_request(None, f"invalid JSON body: the number {text[:40]} overflows a "
                          "double", code="invalid_json")
    return value


def parse_body(raw: bytes, max_depth: int) -> dict[str, Any]:
    """The JSON object in ``raw``; :class:`ApiError` (400) for anything else (see the module
    docstring)."""
    if not raw.strip():
        raise bad_request(None, "the request body is empty; send a JSON object",
                          code="invalid_json")
    if json_depth(raw) > max_depth:
        raise bad_request(None, f"invalid JSON body: nested deeper than {max_depth} levels",
                          code="invalid_json")
    try:
        data = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant,
                          parse_float=_finite_float)
    except ApiError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise bad_request(None, f"invalid JSON body: {reason}", code="invalid_json") from None
    if not isinstance(data, dict):
        raise bad_request(None, f"the request body must be a JSON object, not "
                          f"{type(data).__name__}", code="invalid_json")
    return data
