"""Sampling's per-row passes over the vocabulary in C (``sample_rows.c``): the inverse-CDF draw
of :func:`metagen.decoding.sampler.inverse_cdf_sample` over ``exp(x - max)`` (or a greedy row's
argmax) and each row's ``logsumexp``, two passes per row, the rows shared among the pool's
threads; and :meth:`SampleRows.draw_raw`, a sampled row's whole step (masked ids, temperature,
draw, raw logprob, bad rows) from its raw logits in one call.

:class:`SampleRows` satisfies :class:`metagen.decoding.sampler.RowKernels`; the engine hands it to
:func:`~metagen.decoding.sampler.decode_step` on CPU float32 logits. Measured on the benchmark's
16 rows of 32000 logits, one thread of a 2-core Intel Xeon @ 2.50GHz: see ``benchmarks/README.md``
(workload B). A draw differs from PyTorch's only where its uniform falls within float32 rounding
of a token boundary (the kernel's ``exp`` is within ~2e-7 of libm's); each row's result is the
same on any thread count. :func:`load` returns ``None`` where the native library cannot be
built; :func:`~metagen.decoding.sampler.decode_step` then runs PyTorch's passes.
"""

from __future__ import annotations

import copy
import ctypes
import functools
from collections.abc import Sequence

import numpy as np
import torch

from metagen.engine.native.library import library, open_library
from metagen.engine.native.threads import resolve

_P = ctypes.c_void_p
_I = ctypes.c_int64
_MASK = (1 << 64) - 1


class SampleRows:
    """The loaded kernel, on ``threads`` threads (default: torch's count at each call).
    ``isa`` is its vector width in bits (512 or 256)."""

    def __init__(self, lib: ctypes.CDLL, threads: int | None = None) -> None:
        self._lib = lib
        self.isa: int = lib.mg_isa()
        self._fn = lib.mg_sample_rows
        self._fn.restype = None
        self._fn.argtypes = [_P, _I, _I, _P, _P, _P, ctypes.c_int]
        self._argmax = lib.mg_argmax_rows
        self._argmax.restype = None
        self._argmax.argtypes = [_P, _I, _I, _P, _P, _P, ctypes.c_int]
        self._draw_rows = lib.mg_draw_rows
        self._draw_rows.restype = None
        self._draw_rows.argtypes = [_P, _I, _I, _P, _P, _P, _P, _P, _P, _P, ctypes.c_int]
        self._beam_top = lib.mg_beam_top
        self._beam_top.restype = _I
        self._beam_top.argtypes = [_P, _I, _I, _P, _I, _P, _P, ctypes.c_int]
        self._uniforms = lib.mg_uniforms
        self._uniforms.restype = None
        self._uniforms.argtypes = [_P, _I, ctypes.c_uint64, _P]
        self.threads = threads
        self._on: dict[int, SampleRows] = {}  # on()'s copies, shared by them

    def on(self, threads: int) -> SampleRows:
        """The same kernel on ``threads`` threads (the engine asks each step): a shallow copy,
        which shares the bound C functions, made once per count and kept."""
        n = resolve(threads)
        kernel = self._on.get(n)
        if kernel is None:
            kernel = copy.copy(self)
            kernel.threads = n
            self._on[n] = kernel
        return kernel

    def _rows(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` checked to be ``(B, V)`` float32 on the CPU, made contiguous."""
        if x.dtype != torch.float32 or not x.is_cpu or x.dim() != 2:  # (is_cpu: no device)
            raise ValueError(f"x must be a (B, V) float32 CPU tensor, got {tuple(x.shape)} "
                             f"{x.dtype} on {x.device}")
        return x if x.is_contiguous() else x.contiguous()

    def _run(self, x: torch.Tensor, uniforms: np.ndarray | None
             ) -> tuple[torch.Tensor, torch.Tensor]:
        x = self._rows(x)
        b, v = x.shape
        tok = torch.zeros(b, dtype=torch.int64)
        lse = torch.empty(b, dtype=torch.float64)
        u = None
        if uniforms is not None:
            u = np.ascontiguousarray(uniforms, dtype=np.float64)
            if u.shape != (b,):
                raise ValueError(f"uniforms must have shape ({b},), got {u.shape}")
        if b and v:
            self._fn(x.data_ptr(), b, v, None if u is None else u.ctypes.data, tok.data_ptr(),
                     lse.data_ptr(), resolve(self.threads))
        return tok, lse

    def draw(self, x: torch.Tensor, uniforms: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tokens (B,) int64, logsumexp (B,) float64)`` of ``x`` ``(B, V)`` float32 (each row
        with a finite maximum) at ``uniforms`` ``(B,)`` in ``[0, 1)``."""
        return self._run(x, uniforms)

    def argmax(self, x: torch.Tensor) -> tuple[list[int], list[float], list[float]]:
        """``(tokens, logsumexp, logprobs)``, ``B`` Python values each, of ``x`` ``(B, V)``
        float32: the first index of each row's maximum (``torch.argmax``'s), its
        :meth:`logsumexp` and the token's log-probability ``float32(x[b, t] - logsumexp)``,
        which is finite exactly where the row's maximum is (no NaN, no +inf, not all ``-inf``);
        another row's token and logsumexp are meaningless. Python values because their callers
        read them as such, and making tensors costs more than this pass over a 32000-token row
        (right after a step, each torch operator costs tens of us)."""
        x = self._rows(x)
        b, v = x.shape
        tok, lse, lp = (ctypes.c_int64 * b)(), (ctypes.c_double * b)(), (ctypes.c_float * b)()
        if b and v:
            self._argmax(x.data_ptr(), b, v, tok, lse, lp, resolve(self.threads))
        return tok[:], lse[:], lp[:]  # (a slice: lists, faster than list())

    def draw_raw(self, x: torch.Tensor, uniforms: np.ndarray,
                 temperatures: Sequence[float] | None,
                 masked: Sequence[Sequence[int] | None] | None
                 ) -> tuple[list[int], list[float]]:
        """``(tokens, logprobs)``, ``B`` Python values each: each row of the RAW logits ``x``
        ``(B, V)`` float32 sampled in one pass. The processed row is ``x`` with ``masked[b]``'s
        ids at ``-inf`` (ids outside ``[0, V)`` ignored; None: none), then divided by
        ``float32(temperatures[b])`` (> 0; None: no division); the token is :meth:`draw`'s on
        that processed row at ``uniforms[b]``, bit for bit, and its logprob the raw
        ``float32(x[b, t] - logsumexp(x[b]))`` (:meth:`logsumexp`'s, bit for bit). Token -2 (and
        a NaN logprob): the raw row holds a NaN or +inf or no finite value; -1: the processed
        row has no finite maximum (every finite logit masked, or the division overflowed)."""
        x = self._rows(x)
        b, v = x.shape
        u = np.ascontiguousarray(uniforms, dtype=np.float64)
        if u.shape != (b,) or (temperatures is not None and len(temperatures) != b) or (
                masked is not None and len(masked) != b):
            raise ValueError(f"uniforms, temperatures and masked must have {b} entries")
        t = None if temperatures is None else np.array(temperatures, dtype=np.float32)
        ids, off = (None, None) if masked is None else _csr(masked, v)
        tok, lse, lp = (ctypes.c_int64 * b)(), (ctypes.c_double * b)(), (ctypes.c_float * b)()
        if b and v:
            self._draw_rows(x.data_ptr(), b, v, u.ctypes.data, None if t is None else t.ctypes.data,
                            None if ids is None else ids.ctypes.data,
                            None if off is None else off.ctypes.data, tok, lse, lp,
                            resolve(self.threads))
        return tok[:], lp[:]

    def beam_top(self, x: torch.Tensor, scores: Sequence[float], keep: int
                 ) -> tuple[list[float], list[int]] | None:
        """A beam search step's ``keep`` best candidates from the RAW logits ``x`` ``(B, V)``
        float32 of ``B`` beams with running ``scores``: ``(acc, flat)``, best first, where
        candidate ``flat = b * V + t`` scores ``float32(float32(x[b, t] - logsumexp(x[b])) +
        float32(scores[b]))`` (the beam's score plus the token's log-probability; the logsumexp
        is :meth:`logsumexp`'s, bit for bit), ties to the lower ``flat``; ``min(keep, B * V)``
        of them. None when a row holds a NaN or +inf or no finite value. One pass for each
        row's logsumexp and one for its ``keep`` largest logits, instead of a log-softmax and a
        top-k over all ``B * V``."""
        x = self._rows(x)
        b, v = x.shape
        if len(scores) != b or keep < 1:
            raise ValueError(f"scores must have {b} entries and keep must be >= 1, got "
                             f"{len(scores)} and {keep}")
        n = min(keep, b * v)
        acc, flat = (ctypes.c_float * n)(), (ctypes.c_int64 * n)()
        got = self._beam_top(x.data_ptr(), b, v, (ctypes.c_float * b)(*scores), keep, acc, flat,
                             resolve(self.threads))
        if got == -2:
            raise MemoryError("beam_top: no memory for the rows' candidates")
        return None if got < 0 else (acc[:got], flat[:got])

    def uniforms(self, seeds: Sequence[int], sample_indices: Sequence[int],
                 steps: Sequence[int]) -> np.ndarray:
        """``(B,)`` float64: element ``b`` is
        ``metagen.decoding.rng.uniform_for(seeds[b], sample_indices[b], steps[b])`` bit for bit
        (the same hash in C: one call instead of ``B`` Python hashes). Each argument is taken mod
        2**64, as there."""
        b = len(seeds)
        if len(sample_indices) != b or len(steps) != b:
            raise ValueError("seeds, sample_indices and steps must have the same length")
        c = np.array([(s & _MASK, i & _MASK, t & _MASK)
                      for s, i, t in zip(seeds, sample_indices, steps)], dtype=np.uint64)
        u = np.empty(b, dtype=np.float64)
        if b:
            self._uniforms(c.ctypes.data, b, 0, u.ctypes.data)
        return u

    def logsumexp(self, x: torch.Tensor) -> torch.Tensor:
        """``(B,)`` float64 ``log(sum(exp(x)))`` per row, bit for bit :meth:`draw`'s."""
        return self._run(x, None)[1]


def _csr(masked: Sequence[Sequence[int] | None], vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct ids in ``[0, vocab)``, ascending, one after another, and the
    ``B + 1`` offsets where each row's start (the C kernel's layout), as int64 arrays."""
    flat: list[int] = []
    off = [0]
    for row in masked:
        if row:
            if len(row) == 1:  # the usual case: one end token
                flat += row if 0 <= row[0] < vocab else ()
            else:
                flat += sorted({i for i in row if 0 <= i < vocab})
        off.append(len(flat))
    return np.array(flat or [0], dtype=np.int64), np.array(off, dtype=np.int64)


def load_from(flags: tuple[str, ...]) -> SampleRows:
    """Build (or reuse) the native library with these compiler flags and bind the kernel; raises
    :class:`~metagen.engine.native.build.NativeBuildError` (or :class:`OSError`) on failure."""
    return SampleRows(open_library(flags))


@functools.cache
def load() -> SampleRows | None:
    """The kernel for this machine, or ``None`` where :func:`~.library.library` is ``None``."""
    lib = library()
    return None if lib is None else SampleRows(lib)
