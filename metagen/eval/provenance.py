"""What a ``results.json`` records about where it was produced (L13): library versions and the
machine. Reading it imports nothing heavy that the run has not imported already."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_tile")


def versions() -> dict[str, str | None]:
    """Versions of python, metagen, torch and transformers (None when not installed)."""
    from metagen._version import __version__

    out: dict[str, str | None] = {"python": platform.python_version(), "metagen": __version__}
    for dist in ("torch", "transformers"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[dist] = None
    return out


def hardware(cpuinfo: str | Path = "/proc/cpuinfo") -> dict[str, Any]:
    """CPU model, the vector-extension flags inference speed depends on, core count, platform."""
    model: str | None = platform.processor() or None
    flags: set[str] = set()
    try:
        for line in Path(cpuinfo).read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in (None, "", "x86_64"):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    return {"cpu_model": model, "cpu_flags": {f: f in flags for f in _FLAGS},
            "cores": os.cpu_count(), "platform": sys.platform, "machine": platform.machine()}
