"""How many threads a native kernel call uses: the ones torch is given.

The kernels split their work across a pool of threads owned by the native library
(``pool.c``): started once per process, sleeping between calls, sized at each call from
:func:`torch.get_num_threads`. No torch product runs during a native call, so the pool does not
add threads to MKL's; but torch's OpenMP workers spin for a while after each of torch's own
parallel operators (libgomp's ``GOMP_SPINCOUNT``) and then share the cores with the pool. Each
output element is computed by the same instructions whatever the count, so results are the same
bit for bit on any number of threads.

Measured (``python -m benchmarks.thread_scaling``, ``benchmarks/README.md``; a 2-core Zen 4
VM, shared): default threads / one thread, medians of 3 interleaved rounds, was 0.66x (A) and
0.74x (B) before the pool and is 0.92x (A) and 1.05x (B) with it; A's remaining loss is torch's
spinning workers (with ``GOMP_SPINCOUNT=0`` A ran at 114-118 decode tok/s at default threads
against ~97 on one thread).
"""

from __future__ import annotations

import torch

from metagen.errors import InvalidParameterError


def resolve(threads: int | None) -> int:
    """``threads`` itself (at least 1), or torch's thread count when ``None``. Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``threads`` for a count below 1."""
    if threads is None:
        return max(1, torch.get_num_threads())
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InvalidParameterError("threads", threads, "must be an int >= 1")
    return threads
