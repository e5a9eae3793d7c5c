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
(which needs pre-RoPE keys) is not done, and the engine's ``max_model_len`` bound still applies.
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
