"""Draft proposers for speculative decoding, and prompt lookup (n-gram) proposing.

A proposer drafts up to ``ks[j]`` next tokens for every row ``j`` of a batch in one call:
``propose(keys, token_lists, states, ks) -> Proposal``. ``keys[j]`` identifies the row's sequence
across rounds (the engine passes its ``seq_id``), so a stateful proposer (a draft model's KV)
keeps per-row data under it; ``token_lists[j]`` are the sequence's tokens (prompt + output) and
``states[j]`` its decoding state (params, seeds, output so far). ``forget(key)`` drops a finished
sequence's data.

- :class:`NgramProposer` — prompt lookup decoding (Saxena 2023; the "n-gram" speculator of vLLM):
  find the most recent earlier occurrence of the last ``n`` tokens and propose what followed.
  Deterministic, so ``Proposal.probs`` is None (point-mass drafts).
- :class:`~metagen.engine.draft_proposer.DraftModelProposer` — a small model on its own engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from metagen.decoding import SequenceState
from metagen.errors import InvalidParameterError


@dataclass(slots=True, frozen=True)
class Proposal:
    """Drafts of a batch: ``tokens`` (B, K) (padded with 0 past ``num_draft``), ``num_draft``
    (B,), and ``probs`` (B, K, V), the distributions the drafts were sampled from, or None.
    ``alternatives`` (a draft tree, else None): per row and depth ``d < num_draft``, the
    candidates beside the draft ``tokens[b, d]``, each a leaf (the draft's next best tokens
    there, or draws from ``probs[b, d]`` without replacement after the draft)."""

    tokens: torch.Tensor
    num_draft: torch.Tensor
    probs: torch.Tensor | None = None
    alternatives: list[list[list[int]]] | None = None


class Proposer(Protocol):
    def propose(self, keys: Sequence[int], token_lists: Sequence[Sequence[int]],
                states: Sequence[SequenceState], ks: Sequence[int]) -> Proposal: ...

    def forget(self, key: int) -> None: ...


def ngram_lookup(tokens: Sequence[int], k: int, max_ngram: int = 4, min_ngram: int = 1
                 ) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix
    n-gram (``max_ngram`` down to ``min_ngram``) of ``tokens``; [] when none occurs.

    By where occurrences end: the earlier positions holding the last token (one NumPy
    comparison over the context), kept at n + 1 where the token n before them matches too, so
    each longer n-gram tests only the survivors. Linear in the context at C speed: prompt lookup
    pays most on long inputs, where a start-by-start scan in Python cost milliseconds a row and
    round."""
    n_tok = len(tokens)
    top = min(max_ngram, n_tok - 1)
    if k <= 0 or top < min_ngram:
        return []
    arr = np.fromiter(tokens, dtype=np.int64, count=n_tok)
    ends = np.flatnonzero(arr[:-1] == arr[-1])  # earlier occurrences of the 1-gram, by end
    last = -1  # the end of the most recent occurrence of the longest n-gram >= min_ngram
    for n in range(1, top + 1):
        if n > 1:
            ends = ends[ends >= n - 1]
            ends = ends[arr[ends - (n - 1)] == arr[n_tok - n]]
        if not ends.size:
            break
        if n >= min_ngram:
            last = int(ends[-1])
    return arr[last + 1:last + 1 + k].tolist() if last >= 0 else []


class NgramProposer:
    """Prompt-lookup proposer (see the module docstring)."""

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1) -> None:
        if not isinstance(min_ngram, int) or isinstance(min_ngram, bool) or min_ngram < 1:
            raise InvalidParameterError("min_ngram", min_ngram, "must be an integer >= 1")
        if not isinstance(max_ngram, int) or isinstance(max_ngram, bool) or max_ngram < min_ngram:
            raise InvalidParameterError("max_ngram", max_ngram, f"must be >= min_ngram={min_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, keys: Sequence[int], token_lists: Sequence[Sequence[int]],
                states: Sequence[SequenceState], ks: Sequence[int]) -> Proposal:
        drafts = [ngram_lookup(t, k, self.max_ngram, self.min_ngram)
                  for t, k in zip(token_lists, ks)]
        tokens = torch.zeros(len(drafts), max(ks, default=0), dtype=torch.long)
        for j, d in enumerate(drafts):
            tokens[j, :len(d)] = torch.tensor(d, dtype=torch.long)
        return Proposal(tokens, torch.tensor([len(d) for d in drafts], dtype=torch.long), None)

    def forget(self, key: int) -> None:
        return None
