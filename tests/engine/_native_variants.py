"""The native library's vector paths this CPU can run, for tests that check each of them."""

from __future__ import annotations

from pathlib import Path

from metagen.engine.native import build as native_build

AVX2_FLAGS = ("-O3", "-mavx2", "-mfma", "-mno-avx512f", "-std=c11")


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux), else the empty set."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """(name, flags) of every vector path this CPU can run: the native build, and the AVX2 path
    built explicitly so it is tested on AVX-512 machines too."""
    out = [("native", native_build.NATIVE_FLAGS)]
    if {"avx2", "fma"} <= cpu_flags():
        out.append(("avx2", AVX2_FLAGS))
    return out
