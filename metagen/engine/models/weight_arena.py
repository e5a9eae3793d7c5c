"""One CPU buffer for a model's projection weights, backed by transparent huge pages.

Decoding streams every projection once per token (167 MB for the benchmark target). On 4 KiB
pages that stream takes a TLB miss and a page walk every 4 KiB; on 2 MiB pages it takes one
every 2 MiB. Held in one buffer, the projections also fill whole huge pages: one tensor each
would round every tensor (1-6 MB in that model) up to 2 MiB. On a 2-core Xeon (loaded), the
target's 33 float products took 1.05-1.13x less CPU time at 1 and 16 rows, one and two threads,
AVX-512 and AVX2 builds, and its int8 products at one row 1.05-1.11x (``benchmarks/README.md``,
``benchmarks/weight_pages.py``).

Linux only grants huge pages to a range advised with ``madvise(MADV_HUGEPAGE)`` where
``/sys/kernel/mm/transparent_hugepage/enabled`` is ``madvise`` (or to every range with
``always``), and only to pages first touched after the advice: the arena advises its buffer
before anything writes it. Where the advice is refused (other systems, huge pages turned off)
the arena is an ordinary buffer and behaves the same, only without the gain.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Sequence

import torch

HUGE_PAGE = 2 << 20  # bytes: x86-64's transparent huge page
ALIGN = 64           # bytes: every tensor starts on a cache line
_MADV_HUGEPAGE = 14  # <sys/mman.h> on Linux


def _advise_huge(address: int, nbytes: int) -> bool:
    """``madvise(address, nbytes, MADV_HUGEPAGE)`` (``address`` page aligned); whether the
    kernel accepted it. False off Linux."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc.madvise(address, nbytes, _MADV_HUGEPAGE) == 0


def _padded(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


class WeightArena:
    """Room for tensors of the given ``shapes`` of ``dtype``, handed out in that order by
    :meth:`take` as views of one buffer, each starting on a 64-byte boundary. The buffer's huge
    pages lie inside its own allocation, so no other object shares them. ``huge`` says whether
    the kernel accepted the huge-page advice. Not thread safe; the views keep the buffer alive.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], dtype: torch.dtype = torch.float32
                 ) -> None:
        self.dtype = dtype
        self._shapes = [tuple(s) for s in shapes]
        self._itemsize = torch.empty((), dtype=dtype).element_size()
        used = sum(_padded(math.prod(s) * self._itemsize) for s in self._shapes)
        span = -(-used // HUGE_PAGE) * HUGE_PAGE  # whole huge pages
        self._buffer = torch.empty(span + HUGE_PAGE, dtype=torch.uint8)  # + room to align
        self._offset = -self._buffer.data_ptr() % HUGE_PAGE
        self.huge = span > 0 and _advise_huge(self._buffer.data_ptr() + self._offset, span)
        self._next = 0

    def take(self, shape: Sequence[int]) -> torch.Tensor:
        """The next tensor, uninitialised; ``shape`` must be the next of the arena's shapes
        (AssertionError otherwise: a caller's bug)."""
        assert self._next < len(self._shapes) and tuple(shape) == self._shapes[self._next], shape
        self._next += 1
        nbytes = math.prod(shape) * self._itemsize
        view = self._buffer[self._offset:self._offset + nbytes].view(self.dtype).view(*shape)
        self._offset += _padded(nbytes)
        return view
