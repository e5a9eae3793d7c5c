"""Hard constraints and additive biases over ``(B, V)`` logits: pure functions.

Each function returns a new tensor and leaves its input alone. Removed tokens get ``-inf``.
The helpers ``banned_by_*`` compute, for one sequence, the token ids its next step may not take;
:func:`rows_to_mask` turns per-row id lists into a ``(B, V)`` mask. Token ids outside ``[0, V)`` are
ignored here (backends validate ids against the vocabulary when a request arrives).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

NEG_INF = float("-inf")


def flat_row_ids(rows: Sequence[Sequence[int] | None], vocab_size: int
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenate per-row id lists into ``(row, id)`` index tensors, dropping ids outside
    ``[0, V)`` (``None`` rows contribute nothing)."""
    flat: list[int] = []
    lengths: list[int] = []
    for ids in rows:
        if ids:
            flat.extend(ids)
            lengths.append(len(ids))
        else:
            lengths.append(0)
    cols = torch.from_numpy(np.array(flat, dtype=np.int64))  # much faster than torch.tensor
    row_idx = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor(lengths))
    valid = (cols >= 0) & (cols < vocab_size)
    if not bool(valid.all()):
        cols, row_idx = cols[valid], row_idx[valid]
    return row_idx, cols


def rows_to_mask(rows: Sequence[Sequence[int] | None], vocab_size: int,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """``(B, V)`` bool, True at ``rows[b]``'s ids (``None`` or empty: an all-False row)."""
    mask = torch.zeros((len(rows), vocab_size), dtype=torch.bool, device=device)
    row_idx, cols = flat_row_ids(rows, vocab_size)
    if cols.numel():  # only the indices travel to the device, not a (B, V) mask
        mask[row_idx.to(device), cols.to(device)] = True
    return mask


def bias_matrix(biases: Sequence[Mapping[int, float] | None], vocab_size: int,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """``(B, V)`` float32 dense bias from per-row ``{token id: bias}`` maps (``None``: zeros)."""
    out = torch.zeros((len(biases), vocab_size), dtype=torch.float32, device=device)
    for b, bias in enumerate(biases):
        if bias:
            items = [(t, v) for t, v in bias.items() if 0 <= t < vocab_size]
            if items:
                ids, vals = zip(*items)
                out[b, torch.tensor(ids, device=device)] = torch.tensor(
                    vals, dtype=torch.float32, device=device)
    return out


def apply_bias(logits: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``logits + bias`` (both ``(B, V)``); OpenAI ``logit_bias`` semantics."""
    return logits + bias.to(logits.dtype)


def mask_tokens(logits: torch.Tensor, banned: torch.Tensor) -> torch.Tensor:
    """Set ``logits`` to ``-inf`` where ``banned`` (``(B, V)`` bool) is True."""
    return logits.masked_fill(banned, NEG_INF)


def mask_ids(logits: torch.Tensor, rows: Sequence[Sequence[int] | None],
             in_place: bool = False) -> torch.Tensor:
    """``mask_tokens(logits, rows_to_mask(rows, V))`` without the dense ``(B, V)`` mask: sets
    ``-inf`` at each row's ids (a few per row: EOS under ``min_tokens``, bad words), ids outside
    ``[0, V)`` ignored. Returns a new tensor, or with ``in_place`` writes ``logits`` and returns
    it (no ``(B, V)`` copy)."""
    row_idx, cols = flat_row_ids(rows, logits.shape[1])
    if not cols.numel():
        return logits if in_place else logits.clone()
    dev = logits.device
    index, value = (row_idx.to(dev), cols.to(dev)), torch.tensor(NEG_INF, dtype=logits.dtype,
                                                                   device=dev)
    return logits.index_put_(index, value) if in_place else logits.index_put(index, value)


def keep_only(logits: torch.Tensor, allowed: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """Rows with ``active[b]`` (``(B,)`` bool) keep only tokens where ``allowed`` (``(B, V)``)."""
    return logits.masked_fill(~allowed & active[:, None], NEG_INF)


_BYTE_BITS = ((torch.arange(256)[:, None] >> torch.arange(8)) & 1).bool()  # (256, 8)


def unpack_bitmask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """``(B, V)`` bool from a ``(B, W)`` int32 bitmask (token ``t`` is bit ``t % 32`` of word
    ``t // 32``, llguidance's layout); tokens past ``32 * W`` are False."""
    table = _BYTE_BITS.to(bitmask.device)  # one gather: byte value -> its 8 bits, low first
    octets = bitmask.contiguous().view(torch.uint8).to(torch.int64)  # little-endian words
    flat = table[octets].reshape(bitmask.shape[0], -1)
    if flat.shape[1] >= vocab_size:
        return flat[:, :vocab_size]
    pad = torch.zeros((flat.shape[0], vocab_size - flat.shape[1]), dtype=torch.bool,
                      device=flat.device)
    return torch.cat([flat, pad], dim=1)


def banned_by_bad_words(tokens: Sequence[int], bad_words_ids: Sequence[Sequence[int]]) -> list[int]:
    """Last tokens of the bad words that the next token would complete.

    A one-token bad word is always banned; a longer one is banned when its prefix is the suffix of
    ``tokens`` (prompt + output, as transformers' ``NoBadWordsLogitsProcessor``).
    """
    out: list[int] = []
    n = len(tokens)
    for word in bad_words_ids:
        k = len(word) - 1
        if k < 0:
            continue
        if k == 0 or (k <= n and all(tokens[n - k + j] == word[j] for j in range(k))):
            out.append(word[-1])
    return out


def banned_by_ngram(tokens: Sequence[int], ngram_size: int) -> list[int]:
    """Tokens that would repeat an n-gram of ``tokens`` (prompt + output, as transformers'
    ``NoRepeatNGramLogitsProcessor`` for decoder-only models). ``ngram_size`` 0 bans nothing."""
    n = len(tokens)
    if ngram_size <= 0 or n < ngram_size:
        return []
    if ngram_size == 1:
        return list(set(tokens))
    seq = tokens if isinstance(tokens, list) else list(tokens)
    k = ngram_size - 1
    prefix = seq[n - k:]
    first = prefix[0]
    out: list[int] = []
    i, stop = -1, n - k  # window starts i with i + ngram_size <= n
    while True:
        try:
            i = seq.index(first, i + 1, stop)  # C-speed scan to the next candidate
        except ValueError:
            return out
        if seq[i:i + k] == prefix:
            out.append(seq[i + k])


def suppressed_end_tokens(n_output: int, min_tokens: int, ignore_eos: bool,
                          eos_token_ids: Sequence[int], stop_token_ids: Sequence[int]) -> list[int]:
    """End tokens to suppress now: EOS always under ``ignore_eos``; EOS and stop tokens while
    fewer than ``min_tokens`` tokens have been generated."""
    out: list[int] = []
    if ignore_eos or n_output < min_tokens:
        out.extend(eos_token_ids)
    if n_output < min_tokens:
        out.extend(stop_token_ids)
    return out
