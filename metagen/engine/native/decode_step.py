"""Every decoder layer of a step of a few new tokens, and the final norm, in one native call
(``decode_step.c``).

At 1-16 new tokens a layer's four products stream the weights, and the forty-odd small
operators around them (norms, rotary embedding, cache write, attention, SiLU gate, residuals)
cost as much again in PyTorch dispatch and allocation. :class:`DecodeStep` runs the whole stack
natively on the model's own weights and the engine's paged KV cache; the
:class:`~metagen.engine.model_runner.ModelRunner` uses it for steps of at most
:attr:`DecodeStep.max_tokens` tokens (decoding, beams, best-of-N samples, speculative
verification) and PyTorch for the rest (prefill). The math is the PyTorch path's; results agree
to float32 rounding (tested against it and against transformers). On an int8 KV cache
(:mod:`metagen.engine.kv_quant`) the step quantizes the new K/V into their blocks with
``write_quantized``'s arithmetic (the same int8 values and scales bit for bit, for the same K/V)
and attends dequantized.

Set ``METAGEN_NATIVE=0`` to turn it off.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from metagen.engine.native.dispatch import ROW_CAP
from metagen.engine.native.library import library
from metagen.engine.native.threads import resolve

if TYPE_CHECKING:
    from metagen.engine.models.llama import LlamaModel

_P = ctypes.c_void_p
_I = ctypes.c_int64


class _Model(ctypes.Structure):
    _fields_ = [("hidden", _I), ("n_heads", _I), ("n_kv_heads", _I), ("head_dim", _I),
                ("inter", _I), ("n_layers", _I), ("eps", ctypes.c_float),
                ("scale", ctypes.c_float), ("cos", _P), ("sin", _P), ("final_norm", _P)]


_PROJECTIONS = ("qkv", "o", "gate_up", "down")
# The float32 projections the step reads from a panel-major copy (see DecodeStep): the two whose
# 512 output columns left each of two threads a 1 KB run of every row (benchmarks/README.md).
PANELLED: tuple[str, ...] = ("o", "down")


class _Layer(ctypes.Structure):
    _fields_ = [(name, _P) for name in (
        "input_norm", "qkv", "qkv_bias", "q_norm", "k_norm", "o", "post_norm", "gate_up", "down",
        *(f"{p}_q" for p in _PROJECTIONS), *(f"{p}_s" for p in _PROJECTIONS))] + [
        ("act8", _I), *((f"{p}_p", _I) for p in _PROJECTIONS)]


class _Plan(ctypes.Structure):
    _fields_ = [("n_rows", _I), ("block_size", _I), ("max_blocks", _I), ("n_groups", _I),
                ("tables", _P), ("start", _P), ("tok_off", _P), ("own_from", _P),
                ("group_off", _P), ("group_rows", _P), ("rope_off", _P), ("tok_at", _P)]


@dataclass(slots=True)
class StepPlan:
    """Which tokens a step runs and what each attends to (int64, on the CPU).

    Row r's new tokens are the flat tokens ``tok_off[r] .. tok_off[r + 1] - 1`` at positions
    ``start[r] ..``; position p lives in cache slot
    ``tables[r, p // block_size] * block_size + p % block_size``. A token attends to its row's
    positions from ``own_from[r]`` up to its own; the positions before ``own_from[r]`` (a shared
    prefix) it attends together with its group: group g is the rows
    ``group_rows[group_off[g] .. group_off[g + 1] - 1]``, which share those positions' blocks.
    Row r's tokens are rotated (RoPE) at their position plus ``rope_off[r]``: the tokens of its
    context that token dropping removed from its table (:mod:`metagen.engine.kv_window`).
    ``token_ids`` are the flat tokens' ids (a NumPy view), where the plan was built with them
    (else empty). ``tok_at`` (empty where the step has no draft-tree leaves): the position each
    flat token stands at, below its own for a leaf (``leaf_gaps``): it is rotated there and
    attends its row's positions before it, and its own (:class:`~metagen.engine.model_runner.
    ExtendRequest`).

    Every field is a view of one buffer, ``flat``, made when it is read: the native call reads
    the buffer at the fields' offsets, so a step allocates one small array and no views. A
    table row may be longer than its row's blocks (``width`` > its length, padded with block
    0): the native step reads only the blocks of its positions. A one-row plan can be
    rewritten in place for the row's next step (:meth:`refill`), so a decoding row's plan is
    built once per ``spare`` blocks, not once per token.
    """

    block_size: int
    n_rows: int
    width: int  # max_blocks: the tables' row length
    flat: torch.Tensor  # the fields, one after another, in the properties' order below
    bounds: tuple[int, ...]  # field i is flat[bounds[i]:bounds[i + 1]]
    token_offsets: list[int]  # tok_off as Python ints
    array: np.ndarray  # flat's NumPy view (the same memory)
    table: list[int]  # a one-row plan's block table as last written (else empty)
    gaps: list[int]  # a one-row plan's leaf gaps (else empty)
    c_struct: _Plan | None = None  # the C view of the plan, made at the first native call

    @classmethod
    def build(cls, block_size: int, block_tables: Sequence[Sequence[int]],
              starts: Sequence[int], lengths: Sequence[int],
              groups: Sequence[tuple[Sequence[int], int]],
              dropped: Sequence[int] | None = None,
              token_ids: Sequence[int] = (), spare: int = 0,
              leaf_gaps: Sequence[Sequence[int]] = ()) -> StepPlan:
        """From per-row block tables, cached counts and new-token counts, the prefix groups
        as (rows, shared blocks) pairs, the rows' dropped token counts (``rope_off``; default
        none) and, optionally, the new tokens' ids in flat order. ``spare``: table room for
        that many more blocks per row (for :meth:`refill`). ``leaf_gaps``: per row, empty or
        each new token's gap (its position minus the one it stands at: 0 but for a draft tree's
        leaves), which makes ``tok_at``."""
        width = max(len(t) for t in block_tables) + spare
        own_from = [0] * len(block_tables)
        rows: list[int] = []
        offsets = [0]
        for members, n_blocks in groups:
            for r in members:
                own_from[r] = n_blocks * block_size
            rows.extend(members)
            offsets.append(len(rows))
        tok_off = [0]
        for n in lengths:
            tok_off.append(tok_off[-1] + n)
        tok_at: list[int] = []
        if any(leaf_gaps):
            for s, n, gaps in zip(starts, lengths, leaf_gaps):
                tok_at.extend(s + j - (gaps[j] if gaps else 0) for j in range(n))
        parts: list[Sequence[int]] = [
            [i for b in block_tables for i in (*b, *[0] * (width - len(b)))], starts,
            tok_off, own_from, offsets, rows,
            dropped if dropped is not None else [0] * len(block_tables), token_ids, tok_at]
        bounds = [0]
        for part in parts:
            bounds.append(bounds[-1] + len(part))
        # one array through numpy (a few us; torch.tensor of a list costs several times that)
        array = np.fromiter(itertools.chain.from_iterable(parts), np.int64, bounds[-1])
        table = list(block_tables[0]) if len(block_tables) == 1 else []
        gaps = list(leaf_gaps[0]) if len(block_tables) == 1 and tok_at else []
        return cls(block_size, len(block_tables), width, torch.from_numpy(array),
                   tuple(bounds), tok_off, array, table, gaps)

    def refill(self, block_table: Sequence[int], start: int, token_ids: Sequence[int],
               dropped: int, leaf_gaps: Sequence[int] = ()) -> bool:
        """Rewrite this one-row plan (built with ``token_ids``) in place to run ``token_ids``
        at positions ``start ..`` of the row ``block_table`` with ``dropped`` tokens dropped
        (and ``leaf_gaps``, as :meth:`build` takes a row's), as :meth:`build` would plan it (the
        table padded to ``width``); returns whether it could: False, and the plan untouched, for
        another number of tokens, other gaps or a table longer than ``width``. The plan's
        earlier contents are gone: a caller keeps one plan per step."""
        b = self.bounds
        n = len(token_ids)
        if self.n_rows != 1 or n != b[8] - b[7] or len(block_table) > self.width or (
                (leaf_gaps or self.gaps) and list(leaf_gaps) != self.gaps):
            return False
        a = self.array
        if block_table != self.table:  # a new block, once every block_size tokens
            k = len(block_table)
            a[:k] = block_table
            a[k:self.width] = 0
            self.table = list(block_table)
        a[b[1]] = start
        a[b[6]] = dropped
        if n == 1:
            a[b[7]] = token_ids[0]
        else:
            a[b[7]:b[8]] = token_ids
        if self.gaps:
            a[b[8]:b[9]] = start + np.arange(n) - np.asarray(self.gaps)
        return True

    def _field(self, i: int) -> torch.Tensor:
        return self.flat[self.bounds[i]:self.bounds[i + 1]]

    def address(self, i: int) -> int:
        """The address of field ``i`` (the properties' order) in ``flat``."""
        return self.flat.data_ptr() + self.flat.element_size() * self.bounds[i]

    @property
    def tables(self) -> torch.Tensor:  # (R, max_blocks)
        return self._field(0).view(self.n_rows, self.width)

    @property
    def start(self) -> torch.Tensor:  # (R,)
        return self._field(1)

    @property
    def tok_off(self) -> torch.Tensor:  # (R + 1,)
        return self._field(2)

    @property
    def own_from(self) -> torch.Tensor:  # (R,)
        return self._field(3)

    @property
    def group_off(self) -> torch.Tensor:  # (G + 1,)
        return self._field(4)

    @property
    def group_rows(self) -> torch.Tensor:  # (sum of group sizes,)
        return self._field(5)

    @property
    def rope_off(self) -> torch.Tensor:  # (R,)
        return self._field(6)

    @property
    def token_ids(self) -> np.ndarray:  # (T,) or (0,)
        """A NumPy view: no torch operator (a step reads it right after the weights went
        through the caches, where each dispatch costs tens of us)."""
        return self.array[self.bounds[7]:self.bounds[8]]

    @property
    def tok_at(self) -> torch.Tensor:  # (T,) or (0,)
        return self._field(8)

    def positions_and_slots(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(T,) int64 each: every flat token's RoPE position (the one it stands at,
        ``rope_off`` included) and its cache slot."""
        lens = self.tok_off[1:] - self.tok_off[:-1]
        row = torch.repeat_interleave(torch.arange(lens.shape[0]), lens)  # (T,)
        pos = self.start[row] + torch.arange(row.shape[0]) - self.tok_off[row]
        block = self.tables[row, pos // self.block_size]
        at = self.tok_at if self.tok_at.numel() else pos
        return at + self.rope_off[row], block * self.block_size + pos % self.block_size


class DecodeStep:
    """The native decode step bound to one model's weights (which must not move afterwards).

    The float32 projections named in ``panelled`` (default :data:`PANELLED`) are read from a
    copy made here, panel-major: the output columns in panels of ``panel`` floats (a multiple of
    16; default the library's ``mg_panel_width``: 64 on AVX-512, 16 on AVX2; no copy where it is
    0), each panel (in, its width) row-major, one after another. A thread's share of a
    product is whole panels, so it streams one contiguous region of the copy, four panels at a
    time in storage order, where in the model's (in, out) layout it reads a run of each row (o
    and down, 512 columns, on two threads: 1 KB of every 2 KB row). The copy costs that many
    more bytes (o and down of the benchmark target: +30 MB beside the 101 MB of projections)
    and changes no result: each output element is the same chain of FMAs, bit for bit. On the
    AVX2 build of a 2-core Zen 3 the step ran 1.06x faster so for one row (A), 1.03-1.09x for
    four (C) and 1.04-1.06x for sixteen (B), one and two threads (medians of 21 interleaved
    repeats, ``benchmarks/README.md``).
    ``panelled=()`` reads the model's weights only.

    Use :func:`for_model`, which returns ``None`` where the native path cannot run.
    """

    def __init__(self, lib: ctypes.CDLL, model: LlamaModel,
                 panelled: Sequence[str] = PANELLED, panel: int | None = None) -> None:
        cfg = model.cfg
        assert model.cos is not None and model.sin is not None, "the model's RoPE tables"
        # Every step of up to ROW_CAP tokens (the range the kernels are tested over), whatever
        # the small-row product table says: the fused step also saves PyTorch's per-operator
        # dispatch and runs attention natively. On a 16-core Xeon, a table measured there (rows
        # 0-0 at 16 threads: MKL's spinning workers slowed the kernel in the microbenchmark)
        # took A from 298 to 51 tok/s when it gated this step too.
        self.max_tokens: int = ROW_CAP
        self.threads: int | None = None  # threads per call; None: torch's count at the call
        self._fn = lib.mg_decode_step
        self._fn.restype = ctypes.c_int
        self._fn.argtypes = [_P, _P, _P, _P, _P, _P, _I, ctypes.c_int]
        self._fn_q8 = lib.mg_decode_step_q8
        self._fn_q8.restype = ctypes.c_int
        self._fn_q8.argtypes = [_P, _P, _P, _P, _P, _P, _P, _P, _I, _I, ctypes.c_int]
        self._attn = lib.mg_attention
        self._attn.restype = ctypes.c_int
        self._attn.argtypes = [_P, _P, _P, _I, _P, _P, _P, ctypes.c_int]
        self._attn_q8 = lib.mg_attention_q8
        self._attn_q8.restype = ctypes.c_int
        self._attn_q8.argtypes = [_P, _P, _P, _I, _P, _P, _P, _P, _P, ctypes.c_int]
        self._model = _Model(cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                             cfg.intermediate_size, cfg.num_layers, cfg.rms_norm_eps,
                             cfg.head_dim ** -0.5, model.cos.data_ptr(), model.sin.data_ptr(),
                             model.norm.data_ptr())
        if panel is None:
            lib.mg_panel_width.restype = ctypes.c_int64
            lib.mg_panel_width.argtypes = []
            panel = int(lib.mg_panel_width())
            panelled = panelled if panel else ()
        assert set(panelled) <= set(_PROJECTIONS) and (
            not panelled or panel > 0 and panel % 16 == 0), (panelled, panel)
        copies = _panel_copies(model, panelled, panel)
        self._layers = (_Layer * cfg.num_layers)(
            *(_layer_struct(layer, c, panel) for layer, c in zip(model.layers, copies)))
        self._keep = model  # the pointers above are into its tensors
        self._copies = copies  # and into these
        # (V, hidden): the model's embedding as NumPy, for a step's row gather (no torch op)
        self.embedding: np.ndarray = model.embed.detach().numpy()

    def applies(self, num_tokens: int) -> bool:
        """Whether a step of ``num_tokens`` new tokens should run natively: 1 to
        :attr:`max_tokens`, on any number of threads (see :mod:`.threads`)."""
        return 1 <= num_tokens <= self.max_tokens

    def __call__(self, h: torch.Tensor, plan: StepPlan, k_cache: torch.Tensor,
                 v_cache: torch.Tensor, threads: int | None = None,
                 scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        """Run every layer over ``h`` (T, hidden), the new tokens' embeddings, then the model's
        final RMSNorm, in place (``h`` ends as the final hidden states the LM head reads), and
        write their K/V into ``k_cache``/``v_cache`` (L, num_blocks, block_size, Hkv, D), on
        ``threads`` threads (default: :attr:`threads`). The result is the same bit for bit for
        any thread count: each thread computes its slice of every product's output columns,
        heads and attention units with the one-thread instructions.

        An int8 cache comes with ``scales``, its K and V scales (L, num_blocks, Hkv) float32,
        mutated with it: each layer's new K/V are stored as
        :func:`~metagen.engine.kv_quant.write_quantized` stores them (bit for bit, given the
        same K/V; a block whose scale grows is requantized), then attended as in
        :meth:`attention`. The plan's rows must own the blocks they write (copy-on-write
        done)."""
        n = resolve(self.threads if threads is None else threads)
        assert h.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()
        model, plan_c = ctypes.byref(self._model), ctypes.byref(_plan_struct(plan))
        if k_cache.dtype == torch.int8:
            ks, vs = _checked_scales(k_cache, v_cache, scales)
            failed = self._fn_q8(model, self._layers, plan_c, h.data_ptr(), k_cache.data_ptr(),
                                 v_cache.data_ptr(), ks.data_ptr(), vs.data_ptr(),
                                 k_cache.stride(0), ks.stride(0), n)
        else:
            assert k_cache.dtype == v_cache.dtype == torch.float32 and scales is None
            failed = self._fn(model, self._layers, plan_c, h.data_ptr(), k_cache.data_ptr(),
                              v_cache.data_ptr(), k_cache.stride(0), n)  # one layer's size
        if failed:
            raise MemoryError("native decode step: out of memory for its work buffers")

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                  plan: StepPlan, tokens: torch.Tensor | None = None,
                  threads: int | None = None,
                  scales: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """Attention alone (the step's products run elsewhere): the plan's T tokens, whose K/V
        are already in one layer's ``k_cache``/``v_cache`` (num_blocks, block_size, Hkv, D),
        attend as in :meth:`__call__`. ``q`` (N, Hq, D) float32, each token's heads contiguous
        (its rows may be strided, as a view of the fused q|k|v); the plan's tokens are its rows
        ``tokens`` (T,), or all N rows when ``None`` -> (T, Hq, D). On ``threads`` threads
        (default: :attr:`threads`), with the same result bit for bit for any count.

        An int8 cache (:mod:`metagen.engine.kv_quant`) comes with ``scales``, its K and V
        scales (num_blocks, Hkv) float32: each key block is dequantized as
        :func:`~metagen.engine.kv_quant.dequantize` does, in the kernel, and attended in
        float32, so the result agrees with dequantize-then-attend to float32 rounding."""
        n = resolve(self.threads if threads is None else threads)
        if tokens is not None:
            q = q.index_select(0, tokens)
        t, hq, d = q.shape
        assert (hq, d) == (self._model.n_heads, self._model.head_dim) and q.dtype == torch.float32
        assert q.stride(2) == 1 and q.stride(1) == d and t == plan.token_offsets[-1]
        assert k_cache.is_contiguous() and v_cache.is_contiguous()
        out = torch.empty((t, hq, d), dtype=torch.float32)
        model, plan_c = ctypes.byref(self._model), ctypes.byref(_plan_struct(plan))
        if k_cache.dtype == torch.int8:
            ks, vs = _checked_scales(k_cache, v_cache, scales)
            failed = self._attn_q8(model, plan_c, q.data_ptr(), q.stride(0), out.data_ptr(),
                                   k_cache.data_ptr(), v_cache.data_ptr(), ks.data_ptr(),
                                   vs.data_ptr(), n)
        else:
            assert k_cache.dtype == v_cache.dtype == torch.float32 and scales is None
            failed = self._attn(model, plan_c, q.data_ptr(), q.stride(0), out.data_ptr(),
                                k_cache.data_ptr(), v_cache.data_ptr(), n)
        if failed:
            raise MemoryError("native attention: out of memory for its work buffers")
        return out


def _checked_scales(k_cache: torch.Tensor, v_cache: torch.Tensor,
                    scales: tuple[torch.Tensor, torch.Tensor] | None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The K and V scales of an int8 cache (..., num_blocks, block_size, Hkv, D), checked to be
    contiguous float32 of shape (..., num_blocks, Hkv)."""
    assert scales is not None and v_cache.dtype == torch.int8
    ks, vs = scales
    assert ks.dtype == vs.dtype == torch.float32 and ks.is_contiguous() and vs.is_contiguous()
    assert ks.shape == vs.shape == k_cache.shape[:-3] + k_cache.shape[-2:-1]
    return ks, vs


def _ptr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def panel_major(w: torch.Tensor, panel: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """``w`` (K, N) as the step's panel-major copy, flat (K * N,): columns ``j .. j + panel``
    (fewer in the last panel) as a (K, width) row-major block at ``out[j * K:]``. Written into
    ``out`` where given."""
    k, n = w.shape
    out = torch.empty(k * n, dtype=w.dtype) if out is None else out
    for j in range(0, n, panel):
        width = min(panel, n - j)
        out[j * k:(j + width) * k].view(k, width).copy_(w[:, j:j + width])
    return out


# Per model, the last panel-major copies made of it and what they were made from: engines built
# over one loaded model (several engines, or one per call as the benchmark's peer does) share one
# copy (30 MB on the benchmark target, 5-60 ms to make, mostly new pages' first touch) instead of each making its own. The key
# holds every source's pointer and version counter, so weights changed in place or replaced are
# copied again (inference tensors have no version counter: theirs are never reused).
_PANELS: weakref.WeakKeyDictionary[LlamaModel, tuple[tuple, list[dict[str, torch.Tensor]]]] = (
    weakref.WeakKeyDictionary())
_PANELS_LOCK = threading.Lock()


def _panel_copies(model: LlamaModel, panelled: Sequence[str], panel: int
                  ) -> list[dict[str, torch.Tensor]]:
    """Per layer, the panel-major copies (:func:`panel_major`) of its float32 projections named
    in ``panelled``: the model's cached ones where its weights have not changed since they were
    made (see ``_PANELS``), else new ones (:func:`_make_panel_copies`), then cached."""
    sources = [w for layer in model.layers for p in panelled
               if isinstance(w := getattr(layer, p), torch.Tensor)]
    if any(w.is_inference() for w in sources):  # no version counter: never reused
        return _make_panel_copies(model, panelled, panel)
    key = (tuple(panelled), panel, tuple((w.data_ptr(), w._version) for w in sources))
    with _PANELS_LOCK:
        hit = _PANELS.get(model)
        if hit is not None and hit[0] == key:
            return hit[1]
        copies = _make_panel_copies(model, panelled, panel)
        _PANELS[model] = (key, copies)
        return copies


def _make_panel_copies(model: LlamaModel, panelled: Sequence[str], panel: int
                       ) -> list[dict[str, torch.Tensor]]:
    """Per layer, the panel-major copies (:func:`panel_major`) of its float32 projections named
    in ``panelled``, all in one :class:`~metagen.engine.models.weight_arena.WeightArena` (huge
    pages, as the model's own projections)."""
    from metagen.engine.models.weight_arena import WeightArena  # the models package imports us

    names = [[p for p in panelled if isinstance(w := getattr(layer, p), torch.Tensor)
              and w.dtype == torch.float32] for layer in model.layers]
    shapes = [(getattr(layer, p).numel(),) for layer, ps in zip(model.layers, names) for p in ps]
    if not shapes:
        return [{} for _ in model.layers]
    arena = WeightArena(shapes)
    return [{p: panel_major(getattr(layer, p), panel, arena.take((getattr(layer, p).numel(),)))
             for p in ps} for layer, ps in zip(model.layers, names)]


def _layer_struct(layer: torch.nn.Module, copies: dict[str, torch.Tensor] | None = None,
                  panel: int = 0) -> _Layer:
    """The C view of one :class:`~metagen.engine.models.llama.DecoderLayer`: float32
    projections by their pointer (those in ``copies`` by their panel-major copy, in panels of
    ``panel``), int8 ones by their weight and scales (the float pointer NULL), and whether those
    quantize their activations (``act8``, the same for a layer's projections:
    :func:`~metagen.engine.models.quantize.quantize_model` sets it per model)."""
    from metagen.engine.models.int4 import Int4Weight  # the models package imports this one
    from metagen.engine.models.int8 import Int8Weight

    copies = copies or {}
    fields: dict[str, int | None] = {
        name: _ptr(getattr(layer, name))
        for name in ("input_norm", "qkv_bias", "q_norm", "k_norm", "post_norm")}
    for p in _PROJECTIONS:
        w = getattr(layer, p)
        if isinstance(w, Int8Weight):
            fields.update({p: None, f"{p}_q": w.q.data_ptr(), f"{p}_s": w.scale.data_ptr()})
        elif isinstance(w, Int4Weight):
            fields.update({p: None, f"{p}_q": w.packed.data_ptr(), f"{p}_s": w.ws.data_ptr()})
        elif p in copies:
            fields.update({p: copies[p].data_ptr(), f"{p}_q": None, f"{p}_s": None,
                           f"{p}_p": panel})
        else:
            fields.update({p: w.data_ptr(), f"{p}_q": None, f"{p}_s": None})
    qkv = layer.qkv
    act8 = 2 if isinstance(qkv, Int4Weight) else int(isinstance(qkv, Int8Weight) and qkv.act8)
    return _Layer(**fields, act8=act8)


def _plan_struct(plan: StepPlan) -> _Plan:
    """The C view of ``plan`` (made once per plan: its buffer never moves)."""
    if plan.c_struct is None:
        n_groups = plan.bounds[5] - plan.bounds[4] - 1  # group_off's length - 1
        tok_at = plan.address(8) if plan.bounds[9] > plan.bounds[8] else None
        plan.c_struct = _Plan(plan.n_rows, plan.block_size, plan.width, n_groups,
                              *(plan.address(i) for i in range(7)), tok_at)  # tables .. tok_at
    return plan.c_struct


def for_model(model: LlamaModel) -> DecodeStep | None:
    """The native step for ``model`` (a :class:`~metagen.engine.models.llama.LlamaModel` with
    its RoPE tables built), or ``None``: no native library, or weights that are not float32 on
    the CPU. It reads Llama-layout weights, so the engine reaches it only through the model:
    ``LlamaModel.native_step`` (:meth:`~metagen.engine.models.interface.CausalLM.native_step`)."""
    lib = library()
    if lib is None or model.dtype != torch.float32 or model.device.type != "cpu":
        return None
    return DecodeStep(lib, model)
