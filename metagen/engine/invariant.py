"""Batch-invariant steps: a token's numbers depend on its own context only.

Which kernels compute a row normally depends on the step around it: a step of at most 16 tokens
runs natively, a wider one (a cold prompt's prefill, a large batch) through MKL's products and
PyTorch's attention, and MKL's summation order changes with the shapes it is given. A seeded
sample therefore equals itself across cache states, batch-mates and thread counts only up to
float32 rounding, and a rounding difference at a near-tie can flip a sampled token.

With ``EngineConfig(deterministic=True)`` every step runs through the native decode step in
pieces of at most :attr:`~metagen.engine.native.decode_step.DecodeStep.max_tokens` tokens
(:func:`split_steps`), without Hydragen groups, and the LM head through the native product for
every row count. Their arithmetic per token is fixed: each product's output element is one
chain of multiply-adds over the input in storage order, whatever the number of rows or the
thread that computes it; each query walks its keys in blocks from its row's first position,
whoever else is in the step. A token's hidden state, its K/V and its logits are then the same
bits cold or warm (a prefix-cache hit reads K/V that the same arithmetic wrote), alone or
batched, on any thread count, so a seeded sample is a function of its context, its seed and its
index alone. (The cost: wide prefills stream the weights once per piece, below MKL's GEMM rate.)
"""

from __future__ import annotations

from collections.abc import Sequence


def split_steps(lengths: Sequence[int], max_tokens: int) -> list[list[tuple[int, int, int]]]:
    """The pieces that run rows of ``lengths`` new tokens in steps of at most ``max_tokens``
    tokens: each piece a list of ``(row, first, count)`` (the row's new tokens ``first ..
    first + count - 1``), rows in order, a row's tokens in order across pieces (a piece holding a
    row's later tokens comes after the one holding its earlier ones, whose K/V they attend).
    Pure; raises ``ValueError`` for ``max_tokens`` < 1 or a negative length."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    pieces: list[list[tuple[int, int, int]]] = []
    piece: list[tuple[int, int, int]] = []
    room = max_tokens
    for row, n in enumerate(lengths):
        if n < 0:
            raise ValueError(f"row {row} has a negative length {n}")
        first = 0
        while first < n:
            take = min(room, n - first)
            piece.append((row, first, take))
            first += take
            room -= take
            if not room:
                pieces.append(piece)
                piece, room = [], max_tokens
    if piece:
        pieces.append(piece)
    return pieces
