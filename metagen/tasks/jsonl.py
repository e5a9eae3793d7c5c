"""Reading a data set's JSONL file (gzip-compressed when its name ends in ``.gz``): one record
per line, blank lines skipped, errors located."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from metagen.errors import InvalidParameterError

T = TypeVar("T")


def check_limit(limit: object) -> None:
    """``limit`` is None or a non-negative int; else ``InvalidParameterError`` naming it."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidParameterError("limit", limit, "must be a non-negative integer or None")


def read_jsonl(path: str | Path, parse: Callable[[dict[str, Any], int], T],
               limit: int | None = None) -> list[T]:
    """``parse(record, line_number)`` of each record of the file at ``path``, at most ``limit``.

    Raises ``FileNotFoundError``; ``InvalidParameterError`` named ``FILE:LINE`` for a line that is
    not a JSON object or whose record ``parse`` rejects with ``KeyError`` / ``TypeError`` /
    ``ValueError`` (``parse`` may also raise its own located ``InvalidParameterError``).
    """
    check_limit(limit)
    p = Path(path)
    out: list[T] = []
    for lineno, line in _lines(p):
        if limit is not None and len(out) >= limit:
            break
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise TypeError("a record must be a JSON object")
            out.append(parse(rec, lineno))
        except InvalidParameterError:
            raise
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise InvalidParameterError(f"{p.name}:{lineno}", line[:80],
                                        f"bad record ({exc})") from None
    return out


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opened = gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" \
        else path.open(encoding="utf-8")
    with opened as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield lineno, line
