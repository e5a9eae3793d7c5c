"""What CPU this is, as the native kernels and their benchmarks name it and which vector ISA
they take; read by :mod:`metagen.cpuinfo` (the one rule, shared with a run's provenance)."""

from __future__ import annotations

from metagen.cpuinfo import cpu_class, cpu_flags, cpu_identity, cpu_model

__all__ = ["cpu_class", "cpu_flags", "cpu_identity", "cpu_model", "vector_isa"]


def vector_isa() -> str:
    """The widest vector ISA the kernels have a path for: ``avx512f``, ``avx2`` (with FMA), or
    ``none`` (the PyTorch path only)."""
    flags = cpu_flags()
    return "avx512f" if "avx512f" in flags else "avx2" if {"avx2", "fma"} <= flags else "none"
