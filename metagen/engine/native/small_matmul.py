"""``x @ w`` for a few rows on CPU, by the C kernel ``small_matmul.c`` (built at first use).

Decoding streams every weight once per step. For one row MKL does that near the memory bandwidth,
but for 2-16 rows (beam search, best-of-N, speculative verification, tree siblings) it repacks
the weight on every call and takes about twice as long (table in ``benchmarks/README.md``); the
kernel keeps those products at the one-row cost plus the arithmetic. :func:`load` returns ``None``
wherever the kernel cannot help or cannot be built, and callers then use ``torch.mm``.

On several threads (torch's count; see :mod:`.threads`) each thread computes one contiguous
slice of the output columns. Which row counts it takes, per ISA and thread count, is measured
against MKL (:mod:`.dispatch`, whose docstring names the machines of the shipped tables), up to
:data:`~.dispatch.ROW_CAP` rows. Where it also takes one row on several threads, that keeps
torch's OpenMP team idle, whose workers otherwise spin after each product and compete for the
cores with the native pool's.

Set ``METAGEN_NATIVE=0`` to turn the kernel off.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from metagen.errors import InvalidParameterError
from metagen.engine.native.dispatch import RowRule, rule
from metagen.engine.native.library import library, open_library
from metagen.engine.native.threads import resolve

_P = ctypes.c_void_p
_I = ctypes.c_int64


class SmallMatmul:
    """A loaded kernel library. ``isa`` is its vector width in bits (512 or 256)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.isa: int = lib.mg_isa()
        self._fn = lib.mg_matmul_threads
        self._fn.restype = None
        self._fn.argtypes = [_P, _P, _P, _P, _I, _I, _I, ctypes.c_int]

    def rows(self, threads: int | None = None) -> RowRule:
        """The row counts this kernel takes on ``threads`` threads (default: torch's count), by
        the measured table of its ISA (:mod:`.dispatch`)."""
        return rule(self.isa, resolve(threads))

    def applies(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> bool:
        """Whether ``self(x, w, bias)`` is the faster way: float32 CPU tensors, contiguous,
        no autograd, and a row count :meth:`rows` takes at torch's thread count."""
        return (x.shape[0] in self.rows() and x.dtype == torch.float32
                and w.dtype == torch.float32 and x.device.type == "cpu"
                and w.device.type == "cpu" and x.is_contiguous() and w.is_contiguous()
                and not x.requires_grad
                and (bias is None or (bias.dtype == torch.float32 and bias.is_contiguous())))

    def __call__(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
                 threads: int | None = None) -> torch.Tensor:
        """x (M, K) @ w (K, N) [+ bias (N,)] -> (M, N); operands as :meth:`applies` requires.
        On ``threads`` threads (default: torch's count), each computing a disjoint slice of the
        output columns: the same result bit for bit for any count."""
        n_threads = resolve(threads)
        m, k = x.shape
        n = w.shape[1]
        if w.shape[0] != k or (bias is not None and bias.shape != (n,)):
            raise InvalidParameterError("w", tuple(w.shape), f"does not fit x {tuple(x.shape)} "
                                        f"and bias {None if bias is None else tuple(bias.shape)}")
        y = torch.empty((m, n), dtype=torch.float32)
        if m and n:
            if k == 0:
                return y.copy_(bias.expand(m, n)) if bias is not None else y.zero_()
            self._fn(x.data_ptr(), w.data_ptr(), None if bias is None else bias.data_ptr(),
                     y.data_ptr(), m, k, n, n_threads)
        return y


def load_from(flags: tuple[str, ...]) -> SmallMatmul:
    """Build (or reuse) the native library with these compiler flags and bind its kernel; raises
    :class:`~metagen.engine.native.build.NativeBuildError` (or :class:`OSError` from the loader)
    on failure."""
    return SmallMatmul(open_library(flags))


@functools.cache
def load() -> SmallMatmul | None:
    """The kernel for this machine, or ``None`` where :func:`~.library.library` is ``None``."""
    lib = library()
    return None if lib is None else SmallMatmul(lib)
