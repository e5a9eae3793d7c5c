"""``x @ W^T * scale`` for a few float32 rows and int8 weights, by the C kernels
``int8_matmul.c`` (float32 activations) and ``q8_act.c`` (activations quantized to int8 per
block of 32 on the fly, integer dot products; ``quantize_activations=True``), built at first use
with the rest of the native library.

The weight is ``(out, in)`` int8 with one float32 scale per output channel (see
:mod:`metagen.engine.models.int8`); the kernel widens and converts each weight vector in
registers, so no dequantized copy is ever written, and a decoding step streams a quarter of the
float32 bytes. On several threads (torch's count, :mod:`.threads`) each computes one contiguous
slice of the output channels: the result is the same bit for bit for any count.
:func:`load` returns ``None`` where the library cannot be built; callers then use the PyTorch
fallback (a dequantized product). Set ``METAGEN_NATIVE=0`` to turn it off.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from metagen.engine.native.library import library, open_library
from metagen.engine.native.threads import resolve
from metagen.errors import InvalidParameterError

# The most rows the kernel takes, per vector width: where it beat the dequantized torch product
# (a float32 copy of the weight, then MKL) on the benchmark target's projections at one thread
# (``python -m benchmarks.int8_prefill products``, 2-core Intel Xeon @ 2.50GHz VM under load): with
# AVX-512 it took 0.43-0.55x the product's time at 16-32 rows and 0.79-0.94x at 40-64, so 32
# keeps a clear margin; the AVX2 build was measured once (0.75-0.80x at 24-32 rows on the target,
# a tie or a loss on the small testbed policy) and keeps the 16 rows it had.
MAX_ROWS: dict[int, int] = {512: 32, 256: 16}

_P = ctypes.c_void_p
_I = ctypes.c_int64


class Int8Matmul:
    """A loaded kernel library. ``isa`` is its vector width in bits (512 or 256); ``vnni``
    whether its int8 x int8 dot is the VNNI instruction (the build targets AVX-512 VNNI or
    AVX-VNNI; the same bits as without)."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.isa: int = lib.mg_isa()
        lib.mg_a8_vnni.restype = ctypes.c_int
        lib.mg_a8_vnni.argtypes = []
        self.vnni: bool = bool(lib.mg_a8_vnni())
        self._fn = lib.mg_q8_matmul_threads
        self._fn.restype = None
        self._fn.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, ctypes.c_int]
        self._a8 = lib.mg_a8_matmul_threads
        self._a8.restype = ctypes.c_int
        self._a8.argtypes = self._fn.argtypes

    @property
    def max_rows(self) -> int:
        """The most rows :meth:`applies` gives the kernel: :data:`MAX_ROWS` of its vector width."""
        return MAX_ROWS[self.isa]

    def applies(self, x: torch.Tensor, act8: bool = False) -> bool:
        """Whether the kernel takes activations ``x``: 1 to :attr:`max_rows` contiguous float32
        CPU rows without autograd (decode steps, wide batches; more rows are prefill, where
        MKL's GEMM on a dequantized copy won on the Xeon the cap was measured on; the weight
        side is checked by the caller's type). With ``act8`` (w8a8) on a VNNI build any number
        of rows: each ``vpdpbusd`` does four multiply-adds a lane where a float32 FMA does one,
        and on the 2-core Zen 4 the kernel took 0.43-0.45x MKL's float32 GEMM time at 256 rows
        on the benchmark target's shapes (``benchmarks/README.md``)."""
        return (x.dim() == 2 and 1 <= x.shape[0] and (
                    x.shape[0] <= self.max_rows or act8 and self.vnni)
                and x.dtype == torch.float32 and x.device.type == "cpu" and x.is_contiguous()
                and not x.requires_grad)

    def __call__(self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                 bias: torch.Tensor | None = None, threads: int | None = None,
                 quantize_activations: bool = False) -> torch.Tensor:
        """x (M, K) float32 @ (q (N, K) int8 * scale (N, 1))^T [+ bias (N,)] -> (M, N) float32,
        on ``threads`` threads (default: torch's count). All operands contiguous CPU tensors.
        With ``quantize_activations`` x is first quantized as
        :func:`~metagen.engine.models.int8.quantize_activations` says (the result equals that
        dequantized x's product up to float32 rounding). Raises
        :class:`~metagen.errors.InvalidParameterError` naming ``q`` when the shapes or dtypes do
        not fit; :class:`MemoryError` when the quantized rows cannot be allocated."""
        n_threads = resolve(threads)
        m, k = x.shape
        n = q.shape[0]
        if (q.dtype != torch.int8 or q.dim() != 2 or q.shape[1] != k or scale.shape != (n,)
                or scale.dtype != torch.float32 or not q.is_contiguous()
                or not scale.is_contiguous()
                or (bias is not None and (bias.shape != (n,) or bias.dtype != torch.float32
                                          or not bias.is_contiguous()))):
            raise InvalidParameterError(
                "q", (tuple(q.shape), q.dtype), f"does not fit x {tuple(x.shape)}, scale "
                f"{tuple(scale.shape)} and bias {None if bias is None else tuple(bias.shape)} "
                "(want contiguous int8 (N, K), float32 (N,) scale and bias)")
        y = torch.empty((m, n), dtype=torch.float32)
        if m and n:
            if k == 0:
                return y.copy_(bias.expand(m, n)) if bias is not None else y.zero_()
            args = (x.data_ptr(), q.data_ptr(), scale.data_ptr(),
                    None if bias is None else bias.data_ptr(), y.data_ptr(), m, k, n, n_threads)
            if not quantize_activations:
                self._fn(*args)
            elif self._a8(*args):
                raise MemoryError("native int8 product: out of memory for the quantized rows")
        return y


def load_from(flags: tuple[str, ...]) -> Int8Matmul:
    """Build (or reuse) the native library with these compiler flags and bind the kernel; raises
    :class:`~metagen.engine.native.build.NativeBuildError` (or :class:`OSError`) on failure."""
    return Int8Matmul(open_library(flags))


@functools.cache
def load() -> Int8Matmul | None:
    """The kernel for this machine, or ``None`` where :func:`~.library.library` is ``None``."""
    lib = library()
    return None if lib is None else Int8Matmul(lib)
