"""Counter-based randomness: one uniform per (seed, sample index, step, stream).

A sample's draws must not depend on where its row sits in a batch or on what else is batched
with it (as a per-request seed in vLLM). A stateful generator shared by the batch cannot give
that; a counter-based one can: the uniform for step ``t`` of sample ``i`` is a hash of
``(seed, i, t, stream)``. The hash chains SplitMix64's finalizer (Steele, Lea & Flood, "Fast
splittable pseudorandom number generators", OOPSLA 2014), which passes BigCrush as a generator of
consecutive counters; the top 53 bits give a double in ``[0, 1)``.

The engine's native sampling kernel computes the same hash in C (``sample_rows.c``,
``mg_uniforms``; tested bit for bit against :func:`uniform_for`): a change here must be made
there too.

``stream`` separates independent draws at the same step (e.g. speculative decoding's accept test
and its residual resample, or stochastic beam search's Gumbel noise): use a distinct small
integer per purpose.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_INV_2_53 = 2.0 ** -53
_SCALAR_MAX = 16


def _mix(z: int) -> int:
    z = (z + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK
    return z ^ (z >> 31)


@functools.lru_cache(maxsize=4096)
def _sample_key(seed: int, sample_index: int) -> int:
    """The chain's state after ``(seed, sample_index)``: the same at every step of a sample, so
    a decode step hashes only its step and stream (kept for the 4096 samples used last)."""
    return _mix(_mix(seed & _MASK) ^ (sample_index & _MASK))


def hash64(seed: int, sample_index: int, step: int, stream: int = 0) -> int:
    """The 64-bit hash of the counter tuple (all arguments are taken mod 2**64)."""
    h = _mix(_sample_key(seed, sample_index) ^ (step & _MASK))
    return _mix(h ^ (stream & _MASK))


def uniform_for(seed: int, sample_index: int, step: int, stream: int = 0) -> float:
    """A uniform double in ``[0, 1)`` that depends only on its four arguments."""
    return (hash64(seed, sample_index, step, stream) >> 11) * _INV_2_53


def _mix_np(z: np.ndarray) -> np.ndarray:  # uint64 arithmetic wraps mod 2**64
    z = z + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MUL2)
    return z ^ (z >> np.uint64(31))


def _as_u64(values: Sequence[int] | np.ndarray | int, n: int) -> np.ndarray:
    if isinstance(values, (int, np.integer)):
        return np.full(n, int(values) & _MASK, dtype=np.uint64)
    return np.array([int(v) & _MASK for v in values], dtype=np.uint64)


def uniforms_for(seeds: Sequence[int], sample_indices: Sequence[int],
                 steps: Sequence[int] | int, stream: int = 0) -> np.ndarray:
    """Vectorised :func:`uniform_for`: ``(B,)`` float64, element ``b`` equal to
    ``uniform_for(seeds[b], sample_indices[b], steps[b], stream)`` bit for bit."""
    n = len(seeds)
    if len(sample_indices) != n or (not isinstance(steps, int) and len(steps) != n):
        raise ValueError("seeds, sample_indices and steps must have the same length")
    if n <= _SCALAR_MAX:  # plain Python ints beat NumPy's per-call overhead on small batches
        step_list = [steps] * n if isinstance(steps, int) else steps
        return np.array([uniform_for(int(a), int(b), int(c), stream)
                         for a, b, c in zip(seeds, sample_indices, step_list)], dtype=np.float64)
    with np.errstate(over="ignore"):
        h = _mix_np(_as_u64(seeds, n))
        h = _mix_np(h ^ _as_u64(sample_indices, n))
        h = _mix_np(h ^ _as_u64(steps, n))
        h = _mix_np(h ^ _as_u64(stream, n))
    return (h >> np.uint64(11)).astype(np.float64) * _INV_2_53
