"""How many threads a native kernel call uses: the ones torch is given.

The kernels split their work across a pool of threads owned by the native library
(``pool.c``): started once per process, sleeping between calls, sized at each call from
:func:`torch.get_num_threads`. No torch product runs during a native call, so the pool does not
add threads to MKL's; but torch's OpenMP workers spin for a while after each of torch's own
parallel operators (libgomp's ``GOMP_SPINCOUNT``) and then share the cores with the pool. Each
output element is computed by the same instructions whatever the count, so results are the same
bit for bit on any number of threads. Where other processes hold the cores, the pool's guard runs
jobs on the calling thread alone for a while (a thread taken off its core mid-stage would hold
the others at the stage's barrier): ``pool.c``, ``python -m benchmarks.oversubscribed``.

Measured (``python -m benchmarks.thread_scaling``, ``benchmarks/README.md``; a 2-core Zen 4
VM, shared): default threads / one thread, medians of 3 interleaved rounds, was 0.72x for A
(batch-1 greedy) and B (best-of-16) before the pool and is 1.19x (A) and 1.22x (B) with it. A
torch parallel operator between steps undoes that on a 2-core machine (its spinning workers took
A to 0.92x until the sampler's one-row gather was removed).
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


class torch_threads:  # noqa: N801 -- used as a function: ``with torch_threads(n):``
    """torch's thread count is ``threads`` while inside and what it was after. A slotted class,
    not a generator: it runs once or twice every engine step (a generator-based context manager
    costs several times as much)."""

    __slots__ = ("threads", "before")

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self.before = threads

    def __enter__(self) -> None:
        self.before = torch.get_num_threads()
        if self.before != self.threads:
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc: object) -> None:
        if self.before != self.threads:
            torch.set_num_threads(self.before)


def torch_inline() -> torch_threads:
    """Run torch's operators on the calling thread alone while inside: no OpenMP region starts,
    so no worker is left spinning into the next step's native call. For the small work between
    two forwards (sampling, beam and speculative bookkeeping over ``(rows, vocab)``), which one
    thread does in well under a millisecond. Measured on a 16-core Xeon (AVX-512), beam 4
    (workload C): 50 tok/s at torch's 16 threads, 144 with ``GOMP_SPINCOUNT=0``; the spinning
    workers, not the work, cost the difference. ``torch.set_num_threads`` costs ~0.25 us."""
    return torch_threads(1)
