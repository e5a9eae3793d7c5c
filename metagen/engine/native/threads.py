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

from contextvars import ContextVar, Token

import torch

from metagen.errors import InvalidParameterError

# The native kernels' thread count inside torch_ops_inline (None: torch's count).
_POOL_THREADS: ContextVar[int | None] = ContextVar("metagen_pool_threads", default=None)


def resolve(threads: int | None) -> int:
    """``threads`` itself (at least 1), or when ``None`` the count a :func:`torch_ops_inline`
    block keeps for the native kernels, else torch's thread count. Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``threads`` for a count below 1."""
    if threads is None:
        kept = _POOL_THREADS.get()
        return kept if kept is not None else max(1, torch.get_num_threads())
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


class torch_ops_inline:  # noqa: N801 -- used as a function: ``with torch_ops_inline():``
    """torch's operators on the calling thread alone while inside, the native kernels
    (``threads=None``) still on the count torch had when it was entered. For a forward whose
    products run on the native pool with torch's operators between them (the norms, RoPE and
    attention of a prefill over int4 weights): torch's OpenMP workers, left spinning after each
    of those operators for ~GOMP_SPINCOUNT pauses (milliseconds), shared the cores with the next
    product's pool threads. Measured on a 2-core Zen 3 (AVX2), a 256-token prefill over int4
    weights at two threads: 166-223 ms as it was, against 183-216 at one thread and 106-143 with
    ``GOMP_SPINCOUNT=0`` (``benchmarks/README.md``); the pool's oversubscription guard saw the
    lost time and sent the jobs after it to one thread. Nests: an inner block keeps the outer
    block's count."""

    __slots__ = ("before", "token")

    def __init__(self) -> None:
        self.before = 1
        self.token: Token[int | None] | None = None

    def __enter__(self) -> None:
        self.token = _POOL_THREADS.set(resolve(None))
        self.before = torch.get_num_threads()
        if self.before != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.before != 1:
            torch.set_num_threads(self.before)
        assert self.token is not None
        _POOL_THREADS.reset(self.token)
