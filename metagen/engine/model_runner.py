"""ModelRunner: the "extend" forward of a batch of sequences over the paged KV cache.

API (for the engine, speculative decoding and beam search)::

    runner = ModelRunner(model, kv_cache, hydragen=True)
    logits = runner.extend([ExtendRequest(block_table, num_cached, new_token_ids, all_logits)])

Each :class:`ExtendRequest` is one sequence with ``num_cached`` tokens already in the KV cache
(positions ``0 .. num_cached-1``) and a ragged run of ``new_token_ids`` at positions
``num_cached ..``. ``block_table`` must already have blocks for all
``num_cached + len(new_token_ids)`` positions and the blocks written to must be exclusively owned
(copy-on-write done by the caller). The new tokens' K/V are written into their slots; the result
is, per request, float32 logits of shape (1, V) for the last new token, or (len(new), V) for all
of them when ``all_logits`` (prompt scoring, speculative verification). A row with token
dropping (:mod:`metagen.engine.kv_window`) sets ``dropped_tokens``: that many tokens of its context
(whole blocks after its kept leading ones) are gone, ``block_table`` lists the kept blocks only
and ``num_cached`` counts the kept tokens; its new tokens attend to the kept slots, are written
after them, and are rotated (RoPE) at their original positions ``num_cached + dropped_tokens ..``.
A speculative row whose drafts are a tree (:mod:`metagen.engine.speculative_decoding`) sets
``leaf_gaps``, one per new token: 0 for a token of the row's causal chain; ``g > 0`` for a leaf
hanging off that chain, stored at its position ``p`` but standing at ``p - g`` (its parent's
position + 1): it is rotated at ``p - g`` and attends the row's positions before ``p - g`` and
its own slot, never the other branches stored between.
Rolling a sequence back
(``truncate``) needs nothing from the runner: positions past ``num_cached`` are simply rewritten
by the next extend.

Rows whose block tables start with the same physical blocks are detected automatically and, with
``hydragen``, attend to their common prefix once per group (see :mod:`metagen.engine.attention`).
Rows are attended in chunks (single-token rows apart from multi-token ones, each chunk's padded
tensors under ``ATTN_CHUNK_BYTES``), so a long prefill never pads a batch of decodes and the
transient memory of a step stays bounded. On the CPU with torch on one thread, decode-like
rows bypass this layout and attend natively over the paged cache (see
:meth:`ModelRunner._forward`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from metagen.engine.attention import AttentionMetadata, PrefixGroup, RowChunk
from metagen.engine.invariant import split_steps
from metagen.engine.kv_cache import KVCache
from metagen.engine.models.interface import CausalLM
from metagen.engine.native.decode_step import DecodeStep, StepPlan
from metagen.engine.native.small_matmul import SmallMatmul, load as load_small_matmul
from metagen.errors import InvalidParameterError


ATTN_CHUNK_BYTES = 64 << 20  # bound on a row chunk's transient attention tensors
# Rows of at most this many new tokens may attend natively in a step too large for the native
# decode step (longer rows are prefill chunks, which PyTorch's fused attention does better).
NATIVE_ATTENTION_MAX_ROW = 16
# Table room a one-row native plan is built with: a decoding row's plan is rewritten in place
# for its next steps (one new block every block_size tokens) and rebuilt once per this many.
ROW_PLAN_SPARE = 16


@dataclass(slots=True)
class ExtendRequest:
    """One row of an extend step (see the module docstring)."""

    block_table: Sequence[int]
    num_cached: int
    new_token_ids: Sequence[int]
    all_logits: bool = False
    dropped_tokens: int = 0
    leaf_gaps: Sequence[int] = ()


def _shared_prefixes(reqs: Sequence[ExtendRequest], block_size: int, min_tokens: int = 0
                     ) -> list[tuple[list[int], int]]:
    """Groups of >= 2 rows sharing leading physical blocks: (rows, number of shared blocks).

    A shared block must lie wholly before every member's first new token, so the prefix needs no
    causal mask. Rows are grouped by their first block; the group's prefix is the longest common
    run of block ids; groups sharing fewer than ``min_tokens`` tokens are dropped.
    """
    by_first: dict[int, list[int]] = {}
    for i, r in enumerate(reqs):
        if r.num_cached >= block_size:
            by_first.setdefault(r.block_table[0], []).append(i)
    groups = []
    for rows in by_first.values():
        if len(rows) < 2:
            continue
        n = min(reqs[i].num_cached // block_size for i in rows)
        first = list(reqs[rows[0]].block_table[:n])
        for i in rows:  # each row: one list comparison, a scan only where it differs
            own = list(reqs[i].block_table[:n])
            if own != first:
                n = next(j for j in range(n) if own[j] != first[j])
                first = first[:n]
        if n and n * block_size >= min_tokens:
            groups.append((rows, n))
    return groups


class ModelRunner:
    """Runs the model over the paged KV cache. Stateless between calls apart from the cache (and
    a reused one-row plan buffer, rewritten by each one-row native step).

    ``deterministic``: every step through the native kernels, batch-invariant
    (:mod:`metagen.engine.invariant`); raises :class:`~metagen.errors.InvalidParameterError`
    naming ``deterministic`` where they cannot run (no native build, not a float32 CPU model)."""

    def __init__(self, model: CausalLM, kv_cache: KVCache, hydragen: bool = True,
                 hydragen_min_prefix: int = 0, native: bool = True,
                 deterministic: bool = False) -> None:
        self.model = model
        self.kv = kv_cache
        self.hydragen = hydragen and not deterministic  # a group's prefix is summed apart
        self.hydragen_min_prefix = hydragen_min_prefix
        self.device = model.device
        self.block_size = kv_cache.block_size
        self.hydragen_rows = 0  # rows that attended a shared prefix through Hydragen (a counter)
        self.native = model.native_step() if native else None
        self.native_steps = 0  # steps run by the native decode step (a counter)
        self.native_attention_steps = 0  # steps with PyTorch products, native attention
        self._one_row: StepPlan | None = None  # the last one-row native step's plan
        # the hidden state of a one-token native step (and its NumPy view), reused by each
        row = torch.empty(1, model.cfg.hidden_size, dtype=torch.float32)
        self._token_row = (row, row.numpy())
        # no weight records a graph: a one-token step's head may run outside inference mode
        self._graph_free = not any(p.requires_grad for p in model.parameters())
        self._head: tuple[SmallMatmul, torch.Tensor] | None = (
            _invariant_head(model, self.native) if deterministic else None)

    def _prefix_groups(self, reqs: Sequence[ExtendRequest]) -> list[tuple[list[int], int]]:
        """The Hydragen groups among ``reqs`` (see :func:`_shared_prefixes`; none with Hydragen
        off), counted in :attr:`hydragen_rows`."""
        if not self.hydragen:
            return []
        groups = _shared_prefixes(reqs, self.block_size, self.hydragen_min_prefix)
        self.hydragen_rows += sum(len(rows) for rows, _ in groups)
        return groups

    def _partition(self, reqs: Sequence[ExtendRequest], lens: list[int], candidates: list[int]
                   ) -> list[list[int]]:
        """Split the rows ``candidates`` into chunks: single-token rows first, then the
        multi-token ones, and a new chunk whenever the padded transient tensors would pass
        ATTN_CHUNK_BYTES."""
        cfg = self.model.cfg
        elem = self.model.dtype.itemsize  # an int8 cache's gathered K/V are dequantized
        order = ([i for i in candidates if lens[i] == 1]
                 + [i for i in candidates if lens[i] > 1])
        chunks: list[list[int]] = []
        rows: list[int] = []
        m = c = 0
        for i in order:
            m2 = max(m, lens[i])
            c2 = max(c, reqs[i].num_cached + lens[i])
            cost = (len(rows) + 1) * (2 * c2 * cfg.num_kv_heads * cfg.head_dim * elem
                                      + 3 * 4 * cfg.num_heads * m2 * c2)
            if rows and (cost > ATTN_CHUNK_BYTES or (m == 1) != (m2 == 1)):
                chunks.append(rows)
                rows, m2, c2 = [], lens[i], reqs[i].num_cached + lens[i]
            rows.append(i)
            m, c = m2, c2
        if rows:
            chunks.append(rows)
        return chunks

    def _chunk(self, reqs: Sequence[ExtendRequest], rows: list[int], offsets: list[int]
               ) -> tuple[RowChunk, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One row chunk and, for its valid queries: flat token index, position in the chunk's
        padded output, cache slot, absolute (RoPE) position."""
        bs = self.block_size
        sub = [reqs[i] for i in rows]
        b = len(sub)
        prefix_blocks = [0] * b
        shared = self._prefix_groups(sub)
        for group_rows, n in shared:
            for i in group_rows:
                prefix_blocks[i] = n
        nblk = max(len(r.block_table) for r in sub)
        table = torch.tensor([list(r.block_table) + [0] * (nblk - len(r.block_table))
                              for r in sub], dtype=torch.long)  # (b, NBmax)
        pos_slots = (table[:, :, None] * bs + torch.arange(bs)).view(b, nblk * bs)
        start = torch.tensor([r.num_cached for r in sub], dtype=torch.long)
        n_new = torch.tensor([len(r.new_token_ids) for r in sub], dtype=torch.long)
        pstart = torch.tensor(prefix_blocks, dtype=torch.long) * bs
        end = start + n_new
        m, c = int(n_new.max()), int((end - pstart).max())
        kvpos = pstart[:, None] + torch.arange(c)  # (b, C)
        kv_valid = kvpos < end[:, None]
        kv_slots = pos_slots.gather(1, kvpos.clamp(max=nblk * bs - 1)) * kv_valid
        ar_m = torch.arange(m)
        qpos = start[:, None] + ar_m  # (b, M)
        q_valid = ar_m[None] < n_new[:, None]
        mask = (kvpos[:, None, :] <= qpos[:, :, None]) & kv_valid[:, None, :]  # (b, M, C)
        at = qpos  # the position each query stands at (a tree leaf's is below its slot's)
        if any(r.leaf_gaps for r in sub):
            gaps = torch.tensor([list(r.leaf_gaps) + [0] * (m - len(r.leaf_gaps)) if r.leaf_gaps
                                 else [0] * m for r in sub], dtype=torch.long)  # (b, M)
            at = qpos - gaps
            mask &= (kvpos[:, None, :] < at[:, :, None]) | (kvpos[:, None, :] == qpos[:, :, None])
        flat = (torch.tensor([offsets[i] for i in rows], dtype=torch.long)[:, None] + ar_m)
        q_index = flat * q_valid
        out_pos = (torch.arange(b)[:, None] * m + ar_m)[q_valid]
        slots = pos_slots.gather(1, qpos.clamp(max=nblk * bs - 1))[q_valid]
        dropped = torch.tensor([r.dropped_tokens for r in sub], dtype=torch.long)
        dev = self.device
        groups = [PrefixGroup(torch.tensor(g, dtype=torch.long, device=dev),
                              pos_slots[g[0], :n * bs].to(dev),
                              _consecutive_start(pos_slots[g[0]:g[0] + 1, :n * bs]))
                  for g, n in shared]
        all_visible = b == 1 and m == 1  # one decoding row sees its whole context: no mask
        chunk = RowChunk(q_index.to(dev), kv_slots.to(dev),
                         None if all_visible else mask.to(dev), groups,
                         _consecutive_start(kv_slots) if b == 1 and not groups else None)
        return chunk, flat[q_valid], out_pos, slots, (at + dropped[:, None])[q_valid]

    def _metadata(self, reqs: Sequence[ExtendRequest], native_rows: Sequence[int] = ()
                  ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, list[int]]:
        """Input ids, positions, attention metadata and each request's token offset for a
        PyTorch forward. The rows ``native_rows`` attend natively (one
        :class:`~metagen.engine.native.decode_step.StepPlan` for all of them); the others in
        padded row chunks."""
        lens = [len(r.new_token_ids) for r in reqs]
        offsets = _offsets(lens)
        total = offsets[-1] + lens[-1]
        out_index = torch.empty(total, dtype=torch.long)
        slot_mapping = torch.empty(total, dtype=torch.long)
        positions = torch.empty(total, dtype=torch.long)
        chunks, base = [], 0
        in_native = set(native_rows)
        padded = [i for i in range(len(reqs)) if i not in in_native]
        for rows in self._partition(reqs, lens, padded):
            chunk, flat, out_pos, slots, pos = self._chunk(reqs, rows, offsets)
            out_index[flat] = out_pos + base
            slot_mapping[flat] = slots
            positions[flat] = pos
            base += chunk.q_index.numel()
            chunks.append(chunk)
        native = None
        if native_rows:
            assert self.native is not None
            plan = self._plan([reqs[i] for i in native_rows])
            flat = torch.cat([torch.arange(offsets[i], offsets[i] + lens[i])
                              for i in native_rows])  # the native tokens, in plan order
            out_index[flat] = base + torch.arange(flat.shape[0])
            positions[flat], slot_mapping[flat] = plan.positions_and_slots()
            tokens = None if flat.shape[0] == total else flat
            native = functools.partial(_native_attention, self.native, plan, tokens)
        input_ids = torch.tensor([t for r in reqs for t in r.new_token_ids], dtype=torch.long)
        dev = self.device
        meta = AttentionMetadata(slot_mapping.to(dev), chunks, out_index.to(dev), native)
        return input_ids.to(dev), positions.to(dev), meta, offsets

    def _forward(self, reqs: Sequence[ExtendRequest]) -> tuple[torch.Tensor, list[int]]:
        """Final hidden states (T, H) of every new token, and each request's offset among them.

        On the CPU (float32 weights, any thread count): a step of at most
        ``native.max_tokens`` tokens runs every layer natively, on torch's threads; in a larger step, every row of at most
        :data:`NATIVE_ATTENTION_MAX_ROW` new tokens (decoding, beams, samples, verification)
        attends natively, straight over the paged cache, and the products run in PyTorch, as
        does everything else (prefill). In such a step, which way a row attends depends only on
        its own length, not on the other rows'. An int8 cache takes the same paths: the native
        step quantizes its new K/V in C, a larger step in PyTorch (kv_quant), and native
        attention dequantizes in the kernel.
        """
        native = self.native
        if self._head is not None and native is not None and self._native_safe(reqs):
            return self._forward_invariant(native, reqs)
        num_tokens = len(reqs[0].new_token_ids) if len(reqs) == 1 else sum(
            len(r.new_token_ids) for r in reqs)
        if native is not None and native.applies(num_tokens) and self._native_safe(reqs):
            self.native_steps += 1
            plan = self._row_plan(reqs[0]) if len(reqs) == 1 else self._plan(reqs, with_ids=True)
            hidden = self.model.forward_native(plan.token_ids, native, plan, self.kv.k,
                                               self.kv.v, self.kv.scales,
                                               self._token_row if num_tokens == 1 else None)
            return hidden, plan.token_offsets[:-1]
        short = [] if native is None else [
            i for i, r in enumerate(reqs) if len(r.new_token_ids) <= NATIVE_ATTENTION_MAX_ROW]
        if short and not self._native_safe([reqs[i] for i in short]):
            short = []
        self.native_attention_steps += bool(short)
        with _inference_mode():
            input_ids, positions, meta, offsets = self._metadata(reqs, short)
            return self.model(input_ids, positions, self.kv.k, self.kv.v, meta,
                              self.kv.scales), offsets

    def _forward_invariant(self, native: DecodeStep, reqs: Sequence[ExtendRequest]
                           ) -> tuple[torch.Tensor, list[int]]:
        """:meth:`_forward` of a deterministic runner: the step's tokens through the native
        step in pieces of at most ``native.max_tokens`` (:func:`split_steps`), each piece's rows
        attending the K/V the earlier pieces wrote."""
        lens = [len(r.new_token_ids) for r in reqs]
        offsets = _offsets(lens)
        hidden = torch.empty(offsets[-1] + lens[-1], self.model.cfg.hidden_size,
                             dtype=torch.float32)  # (T, H)
        for piece in split_steps(lens, native.max_tokens):
            sub = [ExtendRequest(reqs[i].block_table, reqs[i].num_cached + first,
                                 reqs[i].new_token_ids[first:first + n],
                                 dropped_tokens=reqs[i].dropped_tokens,
                                 leaf_gaps=reqs[i].leaf_gaps[first:first + n])
                   for i, first, n in piece]
            self.native_steps += 1
            plan = self._plan(sub, with_ids=True)  # no groups: Hydragen is off
            h = self.model.forward_native(plan.token_ids, native, plan, self.kv.k, self.kv.v,
                                          self.kv.scales)
            done = 0
            for i, first, n in piece:
                hidden[offsets[i] + first:offsets[i] + first + n] = h[done:done + n]
                done += n
        return hidden, offsets

    def _plan(self, reqs: Sequence[ExtendRequest], with_ids: bool = False) -> StepPlan:
        """The native plan of ``reqs``, with their Hydragen groups (and their new tokens' ids
        ``with_ids``)."""
        return StepPlan.build(self.block_size, [r.block_table for r in reqs],
                              [r.num_cached for r in reqs],
                              [len(r.new_token_ids) for r in reqs], self._prefix_groups(reqs),
                              [r.dropped_tokens for r in reqs],
                              [t for r in reqs for t in r.new_token_ids] if with_ids else (),
                              leaf_gaps=[r.leaf_gaps for r in reqs])

    def _row_plan(self, r: ExtendRequest) -> StepPlan:
        """The native plan of the one-row step ``r``: the last one-row plan rewritten in place
        (:meth:`StepPlan.refill`) where it fits, else a new one with room for ROW_PLAN_SPARE
        more blocks (a row has no Hydragen group). The plan is valid until the next call."""
        plan = self._one_row
        if plan is None or not plan.refill(r.block_table, r.num_cached, r.new_token_ids,
                                           r.dropped_tokens, r.leaf_gaps):
            plan = self._one_row = StepPlan.build(
                self.block_size, [r.block_table], [r.num_cached], [len(r.new_token_ids)], (),
                [r.dropped_tokens], r.new_token_ids, spare=ROW_PLAN_SPARE,
                leaf_gaps=[r.leaf_gaps])
        return plan

    def _native_safe(self, reqs: Sequence[ExtendRequest]) -> bool:
        """Whether every position of ``reqs`` has a RoPE row and every block id a cache block:
        the C code reads and writes where these point without checks, so anything else goes to
        PyTorch, which raises its own error."""
        max_positions, num_blocks = self.model.max_positions, self.kv.num_blocks
        for r in reqs:  # a plain loop: it runs every step, where a generator costs more
            table = r.block_table
            if (r.num_cached + r.dropped_tokens + len(r.new_token_ids) > max_positions
                    or table and (min(table) < 0 or max(table) >= num_blocks)):
                return False
        return True

    def extend(self, reqs: Sequence[ExtendRequest]) -> list[torch.Tensor]:
        """Run one step for ``reqs``; returns per request float32 logits (1 or n_new, V). Not
        for concurrent calls (one caller drives a runner: its one-token buffers are reused).

        PyTorch's work runs in inference mode, except where it records no graph anyway and the
        guard would cost more than the work: a native step (a NumPy gather and one C call) and,
        when no weight requires grad, the head of a one-token step (its logits are then a plain
        tensor). Entering and leaving the guard cost ~40 us of CPU right after a step's weights
        went through the caches."""
        if not reqs:
            return []
        for r in reqs:
            if not r.new_token_ids:
                raise ValueError("ExtendRequest.new_token_ids must not be empty")
            if len(r.block_table) * self.block_size < r.num_cached + len(r.new_token_ids):
                raise ValueError("ExtendRequest.block_table does not cover the new tokens")
            if r.leaf_gaps and (len(r.leaf_gaps) != len(r.new_token_ids) or any(
                    not 0 <= g <= j for j, g in enumerate(r.leaf_gaps))):
                raise ValueError("ExtendRequest.leaf_gaps must give each new token a gap in "
                                 "[0, its index]")
        hidden, offsets = self._forward(reqs)  # (T, H)
        if hidden.shape[0] == 1 and self._graph_free and self._head is None:  # one token
            return [self.model.logits(hidden)]
        with _inference_mode():
            return self._logits(reqs, hidden, offsets)

    def _logits(self, reqs: Sequence[ExtendRequest], hidden: torch.Tensor, offsets: list[int]
                ) -> list[torch.Tensor]:
        """Per request, the LM head's logits of its last new token's row of ``hidden``, or of
        all its rows with ``all_logits``."""
        rows: list[int] = []
        spans: list[tuple[int, int]] = []
        for r, off in zip(reqs, offsets):
            n = len(r.new_token_ids)
            first = off if r.all_logits else off + n - 1
            spans.append((len(rows), off + n - first))
            rows.extend(range(first, off + n))
        if len(rows) < hidden.shape[0]:  # rows ascend: all of them are hidden's own order
            hidden = hidden.index_select(0, torch.tensor(rows, dtype=torch.long,
                                                         device=self.device))
        if self._head is not None:  # every row count through one kernel: batch-invariant
            kernel, weight = self._head
            logits = kernel(hidden.contiguous(), weight)  # (N, V)
        else:
            logits = self.model.logits(hidden)  # (N, V)
        if len(spans) == 1:  # one request: all of them (no view to make)
            return [logits]
        return [logits[s:s + k] for s, k in spans]


def _invariant_head(model: CausalLM, native: DecodeStep | None
                    ) -> tuple[SmallMatmul, torch.Tensor]:
    """The native product and the LM head's (hidden, V) float32 weight a deterministic runner
    computes every row's logits with (a transposed copy of a tied embedding). Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``deterministic`` where the native
    kernels cannot run the model."""
    kernel = load_small_matmul()
    head = model.head_weight()
    if native is None or kernel is None or not isinstance(head, torch.Tensor) or (
            head.dtype != torch.float32 or model.device.type != "cpu"):
        raise InvalidParameterError(
            "deterministic", True, "needs metagen's native kernels (a C compiler, "
            "METAGEN_NATIVE unset) and a float32 model on the CPU without quantization")
    return kernel, head


def _offsets(lens: Sequence[int]) -> list[int]:
    """Each row's first token among the step's flat tokens (the exclusive prefix sums)."""
    offsets = [0] * len(lens)
    for i in range(1, len(lens)):
        offsets[i] = offsets[i - 1] + lens[i - 1]
    return offsets


def _inference_mode() -> torch._C._InferenceMode:
    """``torch.inference_mode()``'s own guard, without its per-call Python wrapper."""
    return torch._C._InferenceMode(True)


def _native_attention(step: DecodeStep, plan: StepPlan,
                      tokens: torch.Tensor | None, q: torch.Tensor, k_cache: torch.Tensor,
                      v_cache: torch.Tensor, scales: tuple[torch.Tensor, torch.Tensor] | None
                      ) -> torch.Tensor:
    """``AttentionMetadata.native`` for one step: ``step``'s native attention of ``plan``'s
    ``tokens`` over one layer's cache, with its int8 scales when it has them."""
    return step.attention(q, k_cache, v_cache, plan, tokens, scales=scales)


def _consecutive_start(kv_slots: torch.Tensor) -> int | None:
    """``kv_slots[0, 0]`` when the one row's slots (1, C) are ``s, s + 1, ..., s + C - 1``
    (C >= 1)."""
    row = kv_slots[0]
    if row.numel() > 1 and not bool((row[1:] - row[:-1] == 1).all()):
        return None
    return int(row[0])
