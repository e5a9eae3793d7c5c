"""Draft proposers for speculative decoding: a small draft model, and n-gram prompt lookup.

A proposer drafts up to ``k`` next tokens for every row of a batch in one call:
``propose(token_lists, k, states) -> Proposal``. ``states[j]`` is row ``j``'s decoding state
(params, seeds, output so far); the same state object identifies the row across rounds, so a
stateful proposer (the draft model's KV) keys its per-row data on it. ``release()`` frees
whatever the proposer holds once a generation ends.

- :class:`NgramProposer` — prompt lookup decoding (Saxena 2023; the "n-gram" speculator of vLLM):
  find the most recent earlier occurrence of the last ``n`` tokens and propose what followed.
  Deterministic, so ``Proposal.probs`` is None (point-mass drafts).
- :class:`DraftModelProposer` — a smaller model with its own paged KV cache, sampling from its
  own processed distribution ``q`` (returned in ``probs``) with counter-based uniforms; its KV is
  rolled back to the tokens the target kept at the start of each round.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from metagen.decoding import SequenceState, probs_for_sampling, uniforms_for
from metagen.decoding.speculative import sample_inverse_cdf
from metagen.engine.speculative_decoding import PagedSeq, PagedSession
from metagen.errors import InvalidParameterError

DRAFT_STREAM = 13


@dataclass(slots=True, frozen=True)
class Proposal:
    """Drafts of a batch: ``tokens`` (B, K) (padded with 0 past ``num_draft``), ``num_draft``
    (B,), and ``probs`` (B, K, V), the distributions the drafts were sampled from, or None."""

    tokens: torch.Tensor
    num_draft: torch.Tensor
    probs: torch.Tensor | None = None


class Proposer(Protocol):
    def propose(self, token_lists: Sequence[Sequence[int]], k: int,
                states: Sequence[SequenceState]) -> Proposal: ...

    def release(self) -> None: ...


def ngram_lookup(tokens: Sequence[int], k: int, max_ngram: int = 4, min_ngram: int = 1
                 ) -> list[int]:
    """Up to ``k`` tokens that followed the most recent earlier occurrence of the longest suffix
    n-gram (``max_ngram`` down to ``min_ngram``) of ``tokens``; [] when none occurs."""
    n_tok = len(tokens)
    if k <= 0:
        return []
    for n in range(min(max_ngram, n_tok - 1), min_ngram - 1, -1):
        suffix = list(tokens[n_tok - n:])
        for start in range(n_tok - n - 1, -1, -1):  # most recent first, not the suffix itself
            if list(tokens[start:start + n]) == suffix:
                return list(tokens[start + n:start + n + k])
    return []


class NgramProposer:
    """Prompt-lookup proposer (see the module docstring)."""

    def __init__(self, max_ngram: int = 4, min_ngram: int = 1) -> None:
        if not isinstance(min_ngram, int) or min_ngram < 1:
            raise InvalidParameterError("min_ngram", min_ngram, "must be an integer >= 1")
        if not isinstance(max_ngram, int) or max_ngram < min_ngram:
            raise InvalidParameterError("max_ngram", max_ngram, f"must be >= min_ngram={min_ngram}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, token_lists: Sequence[Sequence[int]], k: int,
                states: Sequence[SequenceState]) -> Proposal:
        drafts = [ngram_lookup(t, k, self.max_ngram, self.min_ngram) for t in token_lists]
        tokens = torch.zeros(len(drafts), k, dtype=torch.long)
        for j, d in enumerate(drafts):
            tokens[j, :len(d)] = torch.tensor(d, dtype=torch.long)
        return Proposal(tokens, torch.tensor([len(d) for d in drafts], dtype=torch.long), None)

    def release(self) -> None:
        return None


class DraftModelProposer:
    """Drafts with a small model on its own :class:`PagedSession` (same tokenizer/vocab)."""

    def __init__(self, session: PagedSession) -> None:
        self.session = session
        self._seqs: dict[int, PagedSeq] = {}

    def _sync(self, state: SequenceState, tokens: Sequence[int]) -> PagedSeq:
        seq = self._seqs.get(id(state))
        if seq is None:
            seq = self.session.start(tokens)
            self._seqs[id(state)] = seq
            return seq
        common = 0
        limit = min(len(seq.tokens), len(tokens))
        while common < limit and seq.tokens[common] == tokens[common]:
            common += 1
        self.session.truncate(seq, max(common, 1))
        seq.tokens = list(tokens)
        seq.num_cached = min(seq.num_cached, len(tokens) - 1)  # recompute the last for logits
        return seq

    def propose(self, token_lists: Sequence[Sequence[int]], k: int,
                states: Sequence[SequenceState]) -> Proposal:
        b, vocab = len(token_lists), self.session.vocab_size
        if k == 0:
            return Proposal(torch.zeros(b, 0, dtype=torch.long), torch.zeros(b, dtype=torch.long),
                            torch.zeros(b, 0, vocab))
        seqs = [self._sync(s, t) for s, t in zip(states, token_lists)]
        tokens = torch.zeros(b, k, dtype=torch.long)
        probs = torch.zeros(b, k, vocab, dtype=torch.float32)
        seeds = [s.rng_seed for s in states]
        idx = [s.sample_index for s in states]
        for t in range(k):
            logits = torch.cat(self.session.extend(seqs))  # (B, V)
            pos_states = [SequenceState(s.params, s.prompt_ids,
                                        s.output_ids + tokens[j, :t].tolist(), s.sample_index,
                                        s.eos_token_ids, rng_seed=s.rng_seed)
                          for j, s in enumerate(states)]
            q = probs_for_sampling(logits, pos_states)  # (B, V)
            u = torch.from_numpy(uniforms_for(seeds, idx, [s.step + t for s in states],
                                              DRAFT_STREAM))
            tok = sample_inverse_cdf(q, u)
            tokens[:, t] = tok
            probs[:, t] = q
            for j, seq in enumerate(seqs):
                seq.tokens.append(int(tok[j]))
        return Proposal(tokens, torch.full((b,), k, dtype=torch.long), probs)

    def release(self) -> None:
        for seq in self._seqs.values():
            self.session.release(seq)
        self._seqs.clear()
