"""Sequence and Request: the engine's bookkeeping of one sample and of one user request."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from metagen.decoding.processors import PlainGreedy
from metagen.decoding.state import SequenceState
from metagen.engine.detokenizer import Detokenizer
from metagen.types import Completion, SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    """One sample: its tokens, KV blocks and decoding state.

    ``token_ids`` is prompt + output; the KV of ``token_ids[:num_computed_tokens]`` is in the cache
    in ``block_table`` (position p lives in block ``block_table[p // block_size]``; with token
    dropping, :mod:`metagen.engine.kv_window`, the ``dropped_blocks`` logical blocks after the
    sink blocks are gone from the table, and a later block ``j`` is ``block_table[j -
    dropped_blocks]``). A sequence
    has work to do while ``num_computed_tokens < len(token_ids)``; when the two are equal after a
    forward step it samples its next token. ``score_from`` marks a scoring sequence: it only
    prefills and collects log p(token_ids[j]) for j >= score_from (with ``score_top`` set, also
    the top-``score_top`` alternatives and the rank of token_ids[j] there). ``pending_fork`` children are
    forked off right after the prompt's prefill (n > 1: one prefill, n samples).

    Speculative decoding: ``num_draft`` trailing ``token_ids`` are draft tokens (not in
    ``state.output_ids``), verified in this step and then removed or adopted; ``draft_probs``
    (num_draft, V) are the distributions they were drawn from (None: point masses). A draft
    tree's trailing ``len(draft_leaves)`` drafts are leaves: ``draft_leaves[j]`` is the parent of
    the j-th (0: the row's last token, ``d``: the ``d``-th draft of the chain before them), and
    ``draft_probs`` has the chain's rows only.
    """

    seq_id: int
    request: Request
    state: SequenceState
    token_ids: list[int]
    detok: Detokenizer
    status: Status = Status.WAITING
    block_table: list[int] = field(default_factory=list)
    dropped_blocks: int = 0  # blocks released by the KV window (see above)
    num_computed_tokens: int = 0
    pending_fork: int = 0
    prompt_cached: bool = False  # the prompt's full blocks were inserted into the prefix cache
    score_from: int | None = None
    num_draft: int = 0
    draft_probs: Any = None  # torch.Tensor (num_draft, V) or None
    draft_leaves: list[int] = field(default_factory=list)  # a draft tree's leaves' parents
    score_logprobs: list[float] = field(default_factory=list)
    score_top: int | None = None  # also collect each scored position's top-k and token rank
    score_tops: list[dict[int, float]] = field(default_factory=list)
    score_ranks: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[dict[int, float] | None] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    error: Exception | None = None
    greedy: PlainGreedy | None = None  # plain_greedy(state), decided when the engine made it

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.state.prompt_ids)

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is Status.FINISHED

    def completion(self) -> Completion:
        """The public result of this sample."""
        want_top = self.state.params.logprobs is not None
        return Completion(
            text=self.detok.text,
            token_ids=tuple(self.state.output_ids),
            logprobs=tuple(self.logprobs),
            cumulative_logprob=float(sum(self.logprobs)),
            finish_reason=(self.finish_reason or "length"),  # type: ignore[arg-type]
            top_logprobs=tuple(t or {} for t in self.top_logprobs) if want_top else None,
            stop_reason=self.stop_reason,
        )


@dataclass(slots=True, eq=False)
class Request:
    """A user request: one prompt, its params, its ``n`` samples (or one scoring sequence).

    ``driver`` (a :class:`~metagen.engine.request_driver.RequestDriver`, e.g. beam search)
    replaces sampling for the request's rows and builds its output; ``params`` is then the
    neutral greedy params its sequences carry."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    seqs: list[Sequence] = field(default_factory=list)
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache (first admission)
    admitted: bool = False
    arrival: int = 0
    tag: Any = None
    num_unfinished: int = 0  # sequences of seqs not finished (kept by the engine)
    computed_tokens: int = 0  # tokens run through the model for this request (recompute included)
    generated_tokens: int = 0
    flops: float = 0.0
    driver: Any = None
    first_sample: int = 0  # the sample index, under the seed, of seqs[0] (seqs[j]: + j)

    @property
    def finished(self) -> bool:
        """Every sequence finished, and none still to be forked (the first one forks the other
        samples after its prefill). O(1): a beam request's sequences accumulate over its steps."""
        return bool(self.seqs) and self.num_unfinished == 0 and self.seqs[0].pending_fork == 0

    @property
    def error(self) -> Exception | None:
        """The first error of a sample of this request, if any."""
        return next((s.error for s in self.seqs if s.error is not None), None)
