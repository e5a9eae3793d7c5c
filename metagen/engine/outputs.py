"""What the engine hands back: finished requests, stream deltas, and its compute counters."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from metagen.types import Completion


@dataclass(slots=True)
class RequestOutput:
    """A finished request: one completion per sample (in sample order) and per-sample errors.

    A sample that failed (e.g. NaN logits) has ``finish_reason == "error"`` and
    its exception in ``errors``; the other samples and requests are unaffected.
    """

    request_id: str
    prompt_ids: list[int]
    outputs: list[Completion]
    errors: list[Exception | None]
    num_cached_tokens: int = 0
    scores: list[float] | None = None  # scoring requests: log p(continuation tokens)
    computed_tokens: int = 0  # this request's compute, as EngineStats counts the engine's
    generated_tokens: int = 0
    flops: float = 0.0
    # scoring requests: per sequence, log p(token t | tokens before t) for each scored t
    token_scores: list[list[float]] | None = None
    # scoring requests with a top-k: per sequence and scored t, the top-k {token: logprob}
    # and the rank of token t (1 = most likely)
    token_tops: list[list[dict[int, float]]] | None = None
    token_ranks: list[list[int]] | None = None

    @property
    def error(self) -> Exception | None:
        return next((e for e in self.errors if e is not None), None)


@dataclass(slots=True)
class StreamDelta:
    """New text and tokens of sample ``index`` of a request since the previous delta."""

    request_id: str
    index: int
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    error: Exception | None = None
    logprobs: list[float] = field(default_factory=list)  # of ``token_ids``
    top_logprobs: list[dict[int, float] | None] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class PromptLogprobs:
    """How a model reads a prompt: ``logprobs[t - 1]`` = log p(ids[t] | ids[:t]) for ``t >= 1``;
    when asked for ``k`` alternatives, ``tops[t - 1]`` holds the ``k`` most likely tokens at
    position ``t`` ({token id: logprob}) and ``ranks[t - 1]`` the rank of ``ids[t]`` there
    (1 = most likely); otherwise both are None."""

    logprobs: list[float]
    tops: list[dict[int, float]] | None = None
    ranks: list[int] | None = None


@dataclass(slots=True)
class EngineStats:
    """Cumulative counters (``LLMEngine.counters``). ``computed_tokens`` counts every token run through the model
    (prefill, decode and recompute after preemption); ``flops`` estimates their cost."""

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    computed_tokens: int = 0
    flops: float = 0.0
    steps: int = 0
    preemptions: int = 0
    requests: int = 0

    def snapshot(self) -> EngineStats:
        return EngineStats(*(getattr(self, f.name) for f in fields(self)))


@dataclass(slots=True, frozen=True)
class EngineSnapshot:
    """The engine's state between two steps (:meth:`LLMEngine.stats`): sequences running
    and waiting, KV blocks free and in all, blocks held by the prefix cache and blocks in the
    table of a live sequence (a block can be both), and the cumulative prompt counters."""

    running: int
    waiting: int
    blocks_free: int
    blocks_total: int
    prompt_tokens: int
    cached_prompt_tokens: int
    blocks_cached: int = 0  # stored in the prefix cache
    blocks_in_requests: int = 0  # in the block table of a live sequence


__all__ = ["EngineSnapshot", "EngineStats", "RequestOutput", "StreamDelta"]
