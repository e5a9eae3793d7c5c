"""Continuous batching: which sequences run in the next forward step, and with how many tokens.

Every step (``schedule``), running sequences go first in arrival order (a decode needs one token,
an unfinished prompt a chunk of it), then waiting sequences are admitted while the token budget
(``max_num_batched_tokens``) and ``max_num_seqs`` allow: long prompts are prefilled in chunks
(chunked prefill), and requests join and leave the batch at every step. A newly admitted sequence
first takes the longest cached prefix of its tokens from the radix cache (incref'ing its blocks),
then, where one continues it, the partial last block a finished sequence left (the cache's
tails, :mod:`metagen.engine.tail_cache`: a search's next step starts on all of its computed KV).

Memory never runs out with a crash: when a sequence needs blocks and none are free, the prefix
cache is evicted (LRU; kept partial blocks first), then the most recently admitted running sequence is preempted by
recompute (its blocks are freed and it goes back to the head of the queue, its tokens kept). A
waiting sequence holds no blocks, so the engine always makes progress as long as one sequence of
``max_model_len`` tokens fits in the cache (checked by the engine; with a KV window, what such a
sequence holds at once, :func:`~metagen.engine.kv_window.held_blocks`). With a KV window
(``EngineConfig.kv_window_tokens``, :mod:`metagen.engine.kv_window`) a sequence releases the
blocks its next token no longer attends to before each of its steps (a block shared with the
prefix cache or a sibling is only dereferenced), and only blocks whose KV equals the full
cache's go to the prefix cache: all of them while none was dropped, else the sink blocks. A
running sequence with
nothing to compute is *parked* by its request's driver (see
:mod:`metagen.engine.request_driver`): it keeps its blocks and is skipped.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from metagen.engine.block_manager import BlockManager
from metagen.engine.config import EngineConfig
from metagen.engine.kv_window import released_blocks, sink_blocks
from metagen.engine.radix_cache import RadixCache
from metagen.engine.sequence import Sequence, Status

CopyBlocks = Callable[[list[int], list[int]], None]


class Scheduler:
    """Owns the waiting queue, the running list and the blocks of every live sequence."""

    def __init__(self, config: EngineConfig, blocks: BlockManager, radix: RadixCache | None,
                 copy_blocks: CopyBlocks) -> None:
        self.config = config
        self.blocks = blocks
        self.radix = radix
        self.copy_blocks = copy_blocks
        self.block_size = blocks.block_size
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)

    def add_running(self, seq: Sequence, after: Sequence) -> None:
        """Put a forked child (which already holds its blocks) right after its parent."""
        seq.status = Status.RUNNING
        self.running.insert(self.running.index(after) + 1, seq)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    # -- one step -------------------------------------------------------------------------------

    def schedule(self) -> list[tuple[Sequence, int]]:
        """Pick (sequence, number of new tokens) pairs for the next forward step; reserve blocks."""
        budget = self.config.max_num_batched_tokens
        out: list[tuple[Sequence, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            if seq.num_uncomputed == 0:  # parked by its driver
                i += 1
                continue
            n = min(seq.num_uncomputed, budget)
            while not self.reserve(seq, n):
                victim = self.running[-1]
                self.preempt(victim)
                if victim is seq:
                    break
            if seq.status is Status.RUNNING:
                out.append((seq, n))
                budget -= n
                i += 1
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            cached = self._take_prefix(seq)
            n = min(seq.num_uncomputed, budget)
            if not self.reserve(seq, n):
                self._release(seq)
                break
            self.waiting.popleft()
            if not seq.request.admitted:  # usage counts the first admission only
                seq.request.admitted = True
                seq.request.num_cached_tokens = cached
            seq.status = Status.RUNNING
            self.running.append(seq)
            out.append((seq, n))
            budget -= n
        return out

    def _take_prefix(self, seq: Sequence) -> int:
        """Start ``seq`` on the longest cached prefix of its tokens; return its token count."""
        if self.radix is None or seq.block_table:
            return 0
        limit = len(seq.token_ids) - 1  # at least one token is computed (it yields the logits)
        if seq.score_from is not None:
            limit = min(limit, seq.score_from - 1)
        match = self.radix.match(seq.token_ids[:max(limit, 0)])
        take = match.blocks[:limit // self.block_size]
        if take:
            self.blocks.incref(take)
        seq.block_table = list(take)
        seq.num_computed_tokens = len(take) * self.block_size
        tail = self.radix.tails.take(seq.token_ids, len(take), limit)
        if tail is not None:  # shared read-only: the first write copies it (reserve)
            seq.block_table.append(tail[0])
            seq.num_computed_tokens += tail[1]
        return seq.num_computed_tokens

    def _drop(self, seq: Sequence) -> None:
        """Release the blocks the KV window no longer keeps for the next token of ``seq``."""
        window = self.config.kv_window_tokens
        if window is None:
            return
        bs, sink_tokens = self.block_size, self.config.kv_sink_tokens
        sinks = sink_blocks(bs, sink_tokens)
        k = min(released_blocks(seq.num_computed_tokens + 1, bs, sink_tokens, window)
                - seq.dropped_blocks, len(seq.block_table) - sinks)
        if k > 0:
            self.blocks.free(seq.block_table[sinks:sinks + k])
            del seq.block_table[sinks:sinks + k]
            seq.dropped_blocks += k

    def reserve(self, seq: Sequence, n: int) -> bool:
        """Make ``block_table`` cover ``num_computed + n`` tokens with writable blocks (after
        dropping what the KV window releases)."""
        if self.config.kv_window_tokens is not None:
            self._drop(seq)
        bs = self.block_size
        target_blocks = -(-(seq.num_computed_tokens + n) // bs) - seq.dropped_blocks
        table = seq.block_table
        need = max(0, target_blocks - len(table))
        first_written = seq.num_computed_tokens // bs - seq.dropped_blocks
        cow: list[int] = []  # (a loop, not a comprehension: this runs every step)
        for j in range(first_written, min(len(table), target_blocks)):
            if self.blocks.refcount(table[j]) > 1:
                cow.append(j)
        if not need and not cow:  # writes only blocks it holds alone: most decode steps
            return True
        total = need + len(cow)
        if self.blocks.num_free < total and self.radix is not None:
            self.radix.evict(total - self.blocks.num_free)
        if self.blocks.num_free < total:
            return False
        src, dst = [], []
        for j in cow:
            new, copied = self.blocks.copy_on_write(table[j])
            if copied:
                src.append(table[j])
                dst.append(new)
            table[j] = new
        self.copy_blocks(src, dst)
        table.extend(self.blocks.allocate(need))
        return True

    # -- leaving the batch ----------------------------------------------------------------------

    def _release(self, seq: Sequence) -> None:
        """Drop all blocks of ``seq`` and forget its computed KV (it keeps its tokens)."""
        if seq.block_table:
            self.blocks.free(seq.block_table)
        seq.block_table = []
        seq.dropped_blocks = 0
        seq.num_computed_tokens = 0

    def preempt(self, seq: Sequence) -> None:
        """Recompute-preemption: free the blocks, requeue at the head of the waiting queue."""
        self.running.remove(seq)
        self._release(seq)
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        self.num_preemptions += 1

    def cache_prefix(self, seq: Sequence) -> None:
        """Insert the full computed blocks of ``seq`` into the prefix cache (only its sink blocks
        once the KV window dropped some: the later ones attended to a window, not to the full
        prefix, and the dropped ones are gone)."""
        if self.radix is None:
            return
        n = min(seq.num_computed_tokens, len(seq.token_ids)) // self.block_size
        if seq.dropped_blocks:
            n = min(n, sink_blocks(self.block_size, self.config.kv_sink_tokens))
        if n:
            self.radix.insert(seq.token_ids[:n * self.block_size], seq.block_table[:n])

    def finish(self, seq: Sequence) -> None:
        """Remove a finished/aborted sequence: cache its blocks (whole ones in the radix cache,
        the partial last one in the tail cache), free them, drop it from the lists."""
        if seq.status is Status.RUNNING:
            self.running.remove(seq)
            if seq.error is None:
                self.cache_prefix(seq)
                if self.radix is not None and not seq.dropped_blocks:
                    self.radix.tails.put(seq.token_ids, seq.num_computed_tokens, seq.block_table)
        elif seq.status is Status.WAITING:
            self.waiting.remove(seq)
        self._release(seq)
        seq.status = Status.FINISHED
