"""Token dropping over the paged KV cache: attention sinks + a recent window (StreamingLLM).

Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks": a model keeps
working when it attends to its first few tokens (the *sinks*, which soak up attention mass) and a
window of recent tokens, with everything in between evicted. Here the policy runs at block
granularity: a sequence keeps the blocks holding its first ``sink_tokens`` tokens and the
``window_tokens / block_size`` whole blocks before the block being written (so each new token
sees at least ``window_tokens`` recent tokens, at most ``window_tokens + block_size - 1``); the
blocks in between are released as the sequence grows. They form one run, right after the sink
blocks, that only grows: a sequence's kept blocks are always "sinks, then a contiguous recent
run". Blocks are released before each step of the sequence, for the step's first new token: the
tokens of a multi-token step (a prefill chunk, a scoring request) all see the blocks kept for
the first one plus the step's own, so a prompt prefilled in one chunk attends causally to all of
itself, and a sequence preempted by recompute is recomputed in chunks.

Keys are cached with RoPE applied at their original positions, so new tokens keep their
original positions too. This variant bounds memory and attention compute for long generations
within the model's position range; the paper's re-positioning of the kept keys within the cache
(which needs pre-RoPE keys) is not done, so a sequence is still bounded by the model's positions.
It is not bounded by the cache: what a sequence holds at once (:func:`held_blocks`) is the kept
blocks plus the blocks of one step's new tokens, so the longest sequence an engine serves
(:func:`longest_sequence`) is the model's length whenever that many blocks fit in the cache.
"""

from __future__ import annotations


def sink_blocks(block_size: int, sink_tokens: int) -> int:
    """Blocks holding the first ``sink_tokens`` tokens (whole blocks: rounded up)."""
    return -(-sink_tokens // block_size)


def first_recent_block(num_tokens: int, block_size: int, sink_tokens: int,
                       window_tokens: int | None) -> int:
    """The first logical block of the recent run kept for a sequence whose last token (the one
    attending) is at position ``num_tokens - 1``: blocks from ``sink_blocks`` up to (not
    including) this one are dropped. With ``window_tokens`` None nothing is dropped (the result is
    ``sink_blocks``). ``window_tokens`` must be a multiple of ``block_size``."""
    sinks = sink_blocks(block_size, sink_tokens)
    if window_tokens is None or num_tokens < 1:
        return sinks
    last = (num_tokens - 1) // block_size
    return max(sinks, last - window_tokens // block_size)


def released_blocks(num_tokens: int, block_size: int, sink_tokens: int,
                    window_tokens: int | None) -> int:
    """How many blocks right after the sink blocks a sequence's token at position
    ``num_tokens - 1`` no longer attends to (0 without a window): the most blocks the sequence
    may have dropped when that token is computed."""
    return (first_recent_block(num_tokens, block_size, sink_tokens, window_tokens)
            - sink_blocks(block_size, sink_tokens))


def kept_blocks(num_tokens: int, block_size: int, sink_tokens: int,
                window_tokens: int | None) -> list[int]:
    """The logical blocks (indices into a full block table) a sequence of ``num_tokens`` tokens
    keeps when its token at position ``num_tokens - 1`` attends: the sink blocks, then the
    recent run up to and including the block of that token. Everything when ``window_tokens``
    is None. At most ``sink_blocks + window_tokens / block_size + 1`` blocks."""
    total = -(-num_tokens // block_size)
    sinks = min(sink_blocks(block_size, sink_tokens), total)
    recent = first_recent_block(num_tokens, block_size, sink_tokens, window_tokens)
    return list(range(sinks)) + list(range(max(recent, sinks), total))


def held_blocks(num_tokens: int, block_size: int, sink_tokens: int, window_tokens: int | None,
                step_tokens: int) -> int:
    """The most blocks a sequence of at most ``num_tokens`` tokens holds at once when each of its
    steps computes at most ``step_tokens`` new tokens (a decode step 1, a prefill chunk or a
    recompute after preemption up to ``max_num_batched_tokens``). A step starting with ``c``
    tokens computed holds the blocks kept for token ``c`` plus those its tokens are written to:
    at most ``sink_blocks + window_tokens / block_size + 1 + ceil((n - 1) / block_size)`` for
    ``n = min(step_tokens, num_tokens)``, and never more than the whole sequence's blocks (all
    of them when ``window_tokens`` is None)."""
    total = -(-num_tokens // block_size)
    if window_tokens is None:
        return total
    step = min(step_tokens, num_tokens)
    spill = -(-(step - 1) // block_size) if step > 0 else 0
    return min(total, sink_blocks(block_size, sink_tokens) + window_tokens // block_size + 1
               + spill)


def longest_sequence(max_tokens: int, num_blocks: int, block_size: int, sink_tokens: int,
                     window_tokens: int | None, step_tokens: int) -> int:
    """The longest sequence (at most ``max_tokens``) whose :func:`held_blocks` fit in
    ``num_blocks``: ``max_tokens`` when they do, else what the cache holds whole
    (``num_blocks * block_size``). Exact, since the lengths that fit are a prefix: for lengths
    up to ``step_tokens`` the held blocks are the whole sequence's, and beyond it they are the
    smaller of the whole sequence's and a constant."""
    if held_blocks(max_tokens, block_size, sink_tokens, window_tokens, step_tokens) <= num_blocks:
        return max_tokens
    return min(max_tokens, num_blocks * block_size)
