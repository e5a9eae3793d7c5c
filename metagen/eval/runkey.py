"""The run key: a hash of everything that changes a run's outputs (L5).

Two invocations with equal keys may share a store (resume); a different key is refused unless
the caller forces it. The key covers what :func:`run_key_fields` is given: the task and the
sha256 of its data, the model (path and a fingerprint of the folder's content, or server URL +
name + revision), every sampling parameter, the prompt template and system prompt, the
strategy and its arguments, the reward model, the seed, the sample count, the library version
and executor limits where code runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes (read in chunks)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def run_key(fields: Mapping[str, Any]) -> str:
    """Hex sha256 of ``fields`` as canonical JSON (sorted keys, no whitespace). Values must be
    JSON-serialisable; a value that is not raises ``TypeError`` (never silently stringified)."""
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def key_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Names of the fields whose values differ between two key field sets (sorted)."""
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
