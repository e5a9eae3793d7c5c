"""The native library's vector paths this CPU can run, for tests that check each of them."""

from __future__ import annotations

from metagen.engine.native import build as native_build
from metagen.engine.native.build import AVX2_FLAGS
from metagen.engine.native.cpu import cpu_flags

__all__ = ["cpu_flags", "variants"]


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """(name, flags) of every vector path this CPU can run: the native build, and the AVX2 path
    built explicitly so it is tested on AVX-512 machines too."""
    out = [("native", native_build.NATIVE_FLAGS)]
    if {"avx2", "fma"} <= cpu_flags():
        out.append(("avx2", AVX2_FLAGS))
    return out
