"""Per-sequence decoding state: what the processors and the sampler need to know about a row.

A backend keeps one :class:`SequenceState` per live sequence and passes a batch of them, row by
row, with the ``(B, V)`` logits to :func:`metagen.decoding.decode_step`. The state is mutated only
by the caller (``append``) and by mirostat (its running ``mirostat_mu``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metagen.types import SamplingParams


@dataclass(slots=True)
class SequenceState:
    """Decoding state of one sequence.

    ``sample_index`` is the sample's index among its request's ``n`` samples: with a seed, the
    randomness of step ``t`` depends only on ``(params.seed, sample_index, t)``.
    ``bad_words_ids`` are the token-id sequences of ``params.bad_words`` (tokenized by the backend);
    ``eos_token_ids`` are the model's end tokens (suppressed while ``len(output_ids) < min_tokens``).
    """

    params: SamplingParams
    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    sample_index: int = 0
    eos_token_ids: tuple[int, ...] = ()
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    mirostat_mu: float | None = None

    @property
    def step(self) -> int:
        """Index of the token about to be sampled (0 for the first output token)."""
        return len(self.output_ids)

    def append(self, token_id: int) -> None:
        self.output_ids.append(token_id)
