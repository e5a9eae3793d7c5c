"""What a ``results.json`` records about where it was produced (L13): library versions and the
machine. Reading it imports nothing heavy that the run has not imported already."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from pathlib import Path
from typing import Any

from metagen.cpuinfo import CPUINFO, cpu_flags, cpu_model

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


def hardware(cpuinfo: str | Path = CPUINFO) -> dict[str, Any]:
    """CPU model, the vector-extension flags inference speed depends on, core count, platform;
    the model and flags read from ``cpuinfo`` by :mod:`metagen.cpuinfo`'s rule (the one the
    native kernels are built and chosen by)."""
    flags = cpu_flags(cpuinfo)
    return {"cpu_model": cpu_model(cpuinfo), "cpu_flags": {f: f in flags for f in _FLAGS},
            "cores": os.cpu_count(), "platform": sys.platform, "machine": platform.machine()}
