"""What CPU this is, as the native kernels and their benchmarks name it (Linux; elsewhere what
:mod:`platform` knows)."""

from __future__ import annotations

import platform

from metagen.engine.native.build import cpu_identity


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else :func:`platform.processor` or the
    machine type."""
    line = next((ln for ln in cpu_identity().splitlines() if ln.startswith("model name")), "")
    return line.split(":", 1)[-1].strip() or platform.processor() or platform.machine()


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux), else the empty set."""
    line = next((ln for ln in cpu_identity().splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split()) if line else set()


def vector_isa() -> str:
    """The widest vector ISA the kernels have a path for: ``avx512f``, ``avx2`` (with FMA), or
    ``none`` (the PyTorch path only)."""
    flags = cpu_flags()
    return "avx512f" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "none"
