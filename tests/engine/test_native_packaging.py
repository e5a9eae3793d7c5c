"""The native kernels are built at first use from the files beside ``library.py``, so an installed
wheel must carry every one of them: the C sources and the headers they include (a wheel without
``simd.h`` cannot build, and the engine would fall back to PyTorch)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from metagen.engine.native.library import SOURCES

ROOT = Path(__file__).resolve().parents[2]


def test_package_data_ships_every_file_the_native_build_reads():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = setuptools["package-data"]["*"]
    needed = [*SOURCES, *sorted(SOURCES[0].parent.glob("*.h"))]
    assert any(p.suffix == ".h" for p in needed)
    missing = [p.name for p in needed if not any(fnmatch.fnmatch(p.name, pat) for pat in patterns)]
    assert not missing, f"not package data, so missing from a wheel: {missing}"
