"""The native library: metagen's C kernels compiled together into one shared object.

:func:`library` builds it at first use (see :mod:`.build`) and loads it with :mod:`ctypes`; the
Python bindings (:mod:`.small_matmul`, :mod:`.decode_step`) wrap its functions. It returns
``None`` wherever the kernels cannot run: ``METAGEN_NATIVE=0``, no C compiler, a failed build,
or a CPU with neither AVX-512 nor AVX2 + FMA. Callers then use the PyTorch path.

``METAGEN_NATIVE_ISA=avx2`` builds the AVX2 + FMA path even where the CPU has AVX-512, so the
whole engine runs what an AVX2-only machine runs (its kernels and its measured dispatch table);
``native`` (the default) builds for this CPU with ``-march=native``.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
from pathlib import Path

from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, NativeBuildError, build
from metagen.engine.native.cpu import cpu_flags
from metagen.errors import InvalidParameterError

_HERE = Path(__file__).parent
SOURCES: tuple[Path, ...] = (_HERE / "small_matmul.c", _HERE / "decode_step.c",
                             _HERE / "int8_matmul.c", _HERE / "q8_act.c", _HERE / "q4.c",
                             _HERE / "sample_rows.c",
                             _HERE / "pool.c")
_log = logging.getLogger(__name__)


def open_library(flags: tuple[str, ...] = NATIVE_FLAGS) -> ctypes.CDLL:
    """Build (or reuse) the library with these compiler flags and load it. Raises
    :class:`NativeBuildError` when it cannot be built or has no vector path, :class:`OSError`
    when the loader refuses it."""
    lib = ctypes.CDLL(str(build(SOURCES, flags)))
    lib.mg_isa.restype = ctypes.c_int
    lib.mg_isa.argtypes = []
    if lib.mg_isa() not in (256, 512):
        raise NativeBuildError(f"kernel built without a vector path (isa={lib.mg_isa()})")
    return lib


ISA_FLAGS: dict[str, tuple[str, ...]] = {"native": NATIVE_FLAGS, "avx2": AVX2_FLAGS}


def requested_flags() -> tuple[str, ...]:
    """The build flags ``METAGEN_NATIVE_ISA`` names (default ``native``). Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``METAGEN_NATIVE_ISA`` for any other
    value, and :class:`NativeBuildError` for ``avx2`` on a CPU without AVX2 + FMA (its code
    would stop on an illegal instruction)."""
    isa = os.environ.get("METAGEN_NATIVE_ISA", "native").strip().lower() or "native"
    if isa not in ISA_FLAGS:
        raise InvalidParameterError("METAGEN_NATIVE_ISA", isa, f"must be one of {sorted(ISA_FLAGS)}")
    if isa == "avx2" and not {"avx2", "fma"} <= cpu_flags():
        raise NativeBuildError("METAGEN_NATIVE_ISA=avx2 on a CPU without AVX2 + FMA")
    return ISA_FLAGS[isa]


@functools.cache
def library() -> ctypes.CDLL | None:
    """This machine's library (built for ``METAGEN_NATIVE_ISA``), or ``None`` (turned off, no
    compiler, no vector path). Built once per machine and cached on disk; a failure is logged
    once, never raised, except a ``METAGEN_NATIVE_ISA`` that names no build
    (:class:`~metagen.errors.InvalidParameterError`)."""
    if os.environ.get("METAGEN_NATIVE", "1") == "0":
        return None
    try:
        return open_library(requested_flags())
    except (NativeBuildError, OSError) as e:
        _log.info("native kernels unavailable, using PyTorch: %s", e)
        return None
