"""The native library's vector paths this CPU can run, for tests that check each of them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from metagen.engine.native import build as native_build
from metagen.engine.native.build import AVX2_FLAGS
from metagen.engine.native.cpu import cpu_flags

__all__ = ["cpu_flags", "load_variant", "variants"]

K = TypeVar("K")


def variants() -> list[tuple[str, tuple[str, ...]]]:
    """(name, flags) of every vector path this CPU can run: the native build, and the AVX2 path
    built explicitly so it is tested on AVX-512 machines too."""
    out = [("native", native_build.NATIVE_FLAGS)]
    if {"avx2", "fma"} <= cpu_flags():
        out.append(("avx2", AVX2_FLAGS))
    return out


def load_variant(load_from: Callable[[tuple[str, ...]], K], variant: tuple[str, tuple[str, ...]],
                 tmp_path_factory: Any) -> K:
    """``load_from(flags)`` of one :func:`variants` entry, built into this test session's own
    cache folder (empty when the session starts, so each path is built fresh once per session and
    its library shared by every module after: a build of the whole library takes ~12 s on a
    2-core VM, and 13 modules each building both paths cost ~5 minutes of CI); skips the test
    where this machine has no compiler or cannot build that path. An AVX2 build must report the
    256-bit ISA."""
    name, flags = variant
    if native_build.compiler() is None:
        pytest.skip("no C compiler")
    cache = tmp_path_factory.getbasetemp() / "native_variants_cache"
    cache.mkdir(exist_ok=True)
    os.environ["METAGEN_CACHE_DIR"] = str(cache)
    try:
        kernel = load_from(flags)
    except native_build.NativeBuildError as e:
        pytest.skip(f"this machine cannot build the {name} path: {e}")
    finally:
        del os.environ["METAGEN_CACHE_DIR"]
    if name == "avx2":
        assert getattr(kernel, "isa") == 256
    return kernel
