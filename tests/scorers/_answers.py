"""A tiny answer extractor for scorer/strategy tests (the last integer of the text)."""

from __future__ import annotations

import re


def last_int(text: str) -> str | None:
    found = re.findall(r"-?\d+", text)
    return found[-1] if found else None


def same(a: str, b: object) -> bool:
    return int(a) == int(str(b))
