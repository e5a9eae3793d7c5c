"""Compile a C source of this package into a shared library at first use, and cache it.

The kernels are plain C (no Python or torch headers), so building one takes about a second with
the system's C compiler and needs nothing else; the library is loaded with :mod:`ctypes`. Built
files live under ``$METAGEN_CACHE_DIR`` (default ``$XDG_CACHE_HOME/metagen``, else
``~/.cache/metagen``) in ``native/``, named by a hash of everything that determines them: the
source, the compiler's version, the flags and, since ``-march=native`` targets the building
machine, the CPU. Concurrent builders each write a private temporary file and rename it into
place, so a reader never sees a half-written library.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from metagen.cpuinfo import cpu_identity
from metagen.errors import MetagenError

NATIVE_FLAGS: tuple[str, ...] = ("-O3", "-march=native", "-std=c11")
# The AVX2 + FMA path built explicitly, to test and measure it on AVX-512 machines too.
AVX2_FLAGS: tuple[str, ...] = ("-O3", "-mavx2", "-mfma", "-mno-avx512f", "-std=c11")
BUILD_TIMEOUT_S = 120


class NativeBuildError(MetagenError):
    """No C compiler, or it failed: the caller falls back to the PyTorch path."""


def cache_dir() -> Path:
    """Where built libraries are kept (created on demand)."""
    root = os.environ.get("METAGEN_CACHE_DIR")
    if root:
        return Path(root) / "native"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "metagen" / "native"


def compiler() -> str | None:
    """``$CC`` if set, else the first of cc, gcc, clang on the PATH."""
    return os.environ.get("CC") or next(
        (c for c in ("cc", "gcc", "clang") if shutil.which(c)), None)


def build(sources: Path | Sequence[Path], flags: tuple[str, ...] = NATIVE_FLAGS) -> Path:
    """Path of the one shared library built from the C ``sources`` with ``flags``; compiled on a
    cache miss. The cache key also covers every header (``*.h``) beside the sources, which the
    sources may include.

    Raises :class:`NativeBuildError` when no compiler is found, it fails or times out, or the
    cache directory cannot be written."""
    cc = compiler()
    if cc is None:
        raise NativeBuildError("no C compiler found (set CC, or install cc/gcc/clang)")
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 timeout=30).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeBuildError(f"cannot run the C compiler {cc!r}: {e}") from e
    sources = [sources] if isinstance(sources, Path) else list(sources)
    headers = sorted({h for s in sources for h in s.parent.glob("*.h")})
    texts = [p.read_text() for p in (*sources, *headers)]
    key = hashlib.sha256("\0".join([*texts, cc, version, *flags, cpu_identity()])
                         .encode()).hexdigest()[:16]
    out = cache_dir() / f"{sources[0].stem}-{key}.so"
    names = ", ".join(s.name for s in sources)
    if out.exists():
        return out
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([cc, *flags, "-shared", "-fPIC", "-o", str(tmp),
                               *map(str, sources), "-lm", "-pthread"],
                              capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        if done.returncode != 0:
            raise NativeBuildError(f"{cc} failed on {names}: {done.stderr.strip()[-2000:]}")
        os.replace(tmp, out)
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeBuildError(f"building {names} failed: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return out
