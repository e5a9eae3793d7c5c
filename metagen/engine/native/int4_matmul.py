"""``x @ dequant(W)^T`` for a few float32 rows and int4 weights with group scales, by the C kernel
``q4.c`` (activations quantized to int8 per block of 32 on the fly, integer dot products), built
at first use with the rest of the native library. The weight is packed as
:mod:`metagen.engine.models.int4` packs it. On several threads (torch's count, :mod:`.threads`)
each computes one contiguous slice of the groups of 16 output channels: the result is the same
bit for bit for any count. :func:`load` returns ``None`` where the library cannot be built.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from metagen.engine.native.library import library, open_library
from metagen.engine.native.threads import resolve
from metagen.errors import InvalidParameterError

_P = ctypes.c_void_p
_I = ctypes.c_int64
GROUP = 32  # inputs per weight scale (and per activation scale)
CHANNELS = 16  # output channels per packed group (q4.c's W4G, checked at load)


def packed_bytes(n: int, k: int) -> int:
    """Bytes of an (n, k) int4 weight in ``q4.c``'s layout: ``n`` rounded up to whole groups of
    :data:`CHANNELS`, ``k`` to whole blocks of :data:`GROUP`, two weights a byte."""
    return -(-n // CHANNELS) * CHANNELS * (-(-k // GROUP) * GROUP) // 2


class Int4Matmul:
    """A loaded kernel library."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.isa: int = lib.mg_isa()
        lib.mg_w4_group.restype = _I
        lib.mg_w4_group.argtypes = []
        assert lib.mg_w4_group() == CHANNELS
        self._fn = lib.mg_w4_matmul_threads
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [_P, _P, _P, _P, _P, _I, _I, _I, ctypes.c_int]

    def applies(self, x: torch.Tensor) -> bool:
        """Whether the kernel takes activations ``x``: one or more contiguous float32 CPU rows
        without autograd. Prefill too: its integer products beat MKL's float32 GEMM on the
        float32 weight (let alone a dequantized copy) at every row count measured, 4.2-5.0x at
        256 rows with VNNI and 1.8-1.9x on the AVX2 build (2-core Zen 4, one thread, the
        benchmark target's shapes; ``benchmarks/README.md``)."""
        return (x.dim() == 2 and x.shape[0] >= 1 and x.dtype == torch.float32
                and x.device.type == "cpu" and x.is_contiguous() and not x.requires_grad)

    def __call__(self, x: torch.Tensor, packed: torch.Tensor, ws: torch.Tensor, n: int,
                 bias: torch.Tensor | None = None, threads: int | None = None) -> torch.Tensor:
        """x (M, K) float32 @ dequant(packed, ws) (n, K)^T [+ bias (n,)] -> (M, n) float32, x's
        activations quantized as :func:`~metagen.engine.models.int8.quantize_activations`
        says, on ``threads`` threads (default: torch's count). Raises
        :class:`~metagen.errors.InvalidParameterError` naming ``packed`` when the shapes or
        dtypes do not fit; :class:`MemoryError` when the quantized rows cannot be allocated."""
        n_threads = resolve(threads)
        m, k = x.shape
        groups, blocks = -(-n // CHANNELS), -(-k // GROUP)
        if (packed.dtype != torch.uint8 or packed.numel() != packed_bytes(n, k)
                or ws.shape != (groups, blocks, CHANNELS) or ws.dtype != torch.float32
                or not packed.is_contiguous() or not ws.is_contiguous()
                or (bias is not None and (bias.shape != (n,) or bias.dtype != torch.float32
                                          or not bias.is_contiguous()))):
            raise InvalidParameterError(
                "packed", (tuple(packed.shape), packed.dtype), f"does not fit x {tuple(x.shape)}, "
                f"n={n}, ws {tuple(ws.shape)} and bias "
                f"{None if bias is None else tuple(bias.shape)} (want pack_int4's layout)")
        y = torch.empty((m, n), dtype=torch.float32)
        if m and n:
            if k == 0:
                return y.copy_(bias.expand(m, n)) if bias is not None else y.zero_()
            if self._fn(x.data_ptr(), packed.data_ptr(), ws.data_ptr(),
                        None if bias is None else bias.data_ptr(), y.data_ptr(), m, k, n,
                        n_threads):
                raise MemoryError("native int4 product: out of memory for the quantized rows")
        return y


def load_from(flags: tuple[str, ...]) -> Int4Matmul:
    """Build (or reuse) the native library with these compiler flags and bind the kernel."""
    return Int4Matmul(open_library(flags))


@functools.cache
def load() -> Int4Matmul | None:
    """The kernel for this machine, or ``None`` where :func:`~.library.library` is ``None``."""
    lib = library()
    return None if lib is None else Int4Matmul(lib)
