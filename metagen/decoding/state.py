"""Per-sequence decoding state: what the processors and the sampler need to know about a row.

A backend keeps one :class:`SequenceState` per live sequence and passes a batch of them, row by
row, with the ``(B, V)`` logits to :func:`metagen.decoding.decode_step`. The state is mutated only
by the caller (``append``) and by mirostat (its running ``mirostat_mu``).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Protocol

import torch

from metagen.decoding.bad_text import BadText
from metagen.decoding.healing import Healing
from metagen.types import SEED_MAX, SamplingParams


class TokenConstraint(Protocol):
    """A sequence's output language (:class:`metagen.decoding.grammar.GrammarMatcher`)."""

    def copy(self) -> TokenConstraint:
        """An independent copy in the same state."""

    def sync(self, output_ids: list[int]) -> bool:
        """Follow ``output_ids`` (rolling back as needed); False if the language refuses them."""

    def fill(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into ``bitmask[row]`` (int32 bits, CPU)."""


def fresh_seed() -> int:
    """A random seed in ``[0, 2**63 - 1]`` for requests without one (OS entropy)."""
    return secrets.randbelow(SEED_MAX + 1)


@dataclass(slots=True)
class SequenceState:
    """Decoding state of one sequence.

    ``sample_index`` is the sample's index among its request's ``n`` samples: with a seed, the
    randomness of step ``t`` depends only on ``(params.seed, sample_index, t)``.
    ``bad_text`` is the ban of ``params.bad_words`` as text over the backend's token texts
    (:mod:`metagen.decoding.bad_text`); ``bad_words_ids`` are token-id sequences banned by id
    (transformers' ``NoBadWordsLogitsProcessor`` rule: the last token of a sequence whose other
    tokens end the context), for callers that ban ids rather than text;
    ``eos_token_ids`` are the model's end tokens (suppressed while ``len(output_ids) < min_tokens``,
    and always when ``params.ignore_eos``).

    ``rng_seed`` is the seed the sampler actually uses. Left ``None`` it becomes ``params.seed``,
    or, when the request has no seed, a fresh random seed drawn once here (so the sequence's draws
    are still a pure function of ``(rng_seed, sample_index, step)``). A backend that wants the
    ``n`` unseeded samples of one request to share a seed passes the same ``rng_seed`` to each;
    ``fork`` copies it. ``mirostat_mu`` is Mirostat's running threshold (``None``: not started,
    i.e. ``2 * mirostat_tau``).
    """

    params: SamplingParams
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    sample_index: int = 0
    eos_token_ids: tuple[int, ...] = ()
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    mirostat_mu: float | None = None
    rng_seed: int | None = None
    constraint: TokenConstraint | None = None
    heal: Healing | None = None
    bad_text: BadText | None = None

    def __post_init__(self) -> None:
        if self.rng_seed is None:
            self.rng_seed = self.params.seed if self.params.seed is not None else fresh_seed()

    @property
    def step(self) -> int:
        """Index of the token about to be sampled (0 for the first output token)."""
        return len(self.output_ids)

    def append(self, token_id: int) -> None:
        self.output_ids.append(token_id)

    def fork(self, sample_index: int) -> SequenceState:
        """A copy (own lists) continuing as sample ``sample_index``, same ``rng_seed``."""
        return SequenceState(
            params=self.params, prompt_ids=list(self.prompt_ids), output_ids=list(self.output_ids),
            sample_index=sample_index, eos_token_ids=self.eos_token_ids,
            bad_words_ids=self.bad_words_ids, mirostat_mu=self.mirostat_mu,
            rng_seed=self.rng_seed,
            constraint=None if self.constraint is None else self.constraint.copy(),
            heal=self.heal, bad_text=self.bad_text)
