"""What the server needs from a model, as a Protocol, and its adapter over LocalGenerator.

The server never steps an engine itself: it submits requests to the engine loop through
:class:`Backend` and waits on the handles, so concurrent HTTP requests share engine steps, and a
request whose client goes away is aborted by cancelling its handle (its blocks are freed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from metagen.beam_params import BeamSearchParams
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.loop import RequestHandle
from metagen.engine.outputs import EngineSnapshot, PromptLogprobs
from metagen.generators.base import Generator
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams

SNAPSHOT_TIMEOUT_S = 5.0


class Backend(Protocol):
    """A model served over HTTP (see the module docstring)."""

    @property
    def tokenizer(self) -> Any: ...

    @property
    def max_model_len(self) -> int: ...

    @property
    def generator(self) -> Generator:
        """The model as a Generator, for strategies (they call ``generate``)."""

    @property
    def alive(self) -> bool: ...

    def asubmit(self, prompt_ids: Sequence[Sequence[int]],
                params: SamplingParams | BeamSearchParams, *, stream: bool = False,
                first_sample: int = 0) -> RequestHandle:
        """One request per prompt: sampled, or a beam search (``BeamSearchParams``, whose
        output holds its ``num_return_sequences`` hypotheses, best first)."""

    def validate(self, prompt_ids: Sequence[int],
                 params: SamplingParams | BeamSearchParams) -> None:
        """Raise ``InvalidParameterError`` for a request the model cannot serve."""

    async def aprompt_logprobs(self, prompt_ids: Sequence[int], top: int | None = None
                               ) -> PromptLogprobs:
        """How the model reads the prompt (with ``top`` alternatives per token)."""

    async def stats(self) -> EngineSnapshot:
        """The engine's state between two steps (``LLMEngine.stats``), for ``/metrics``."""


class LocalBackend:
    """:class:`Backend` over a :class:`LocalGenerator` (the built-in engine)."""

    def __init__(self, generator: LocalGenerator) -> None:
        self._generator = generator

    @property
    def generator(self) -> LocalGenerator:
        return self._generator

    @property
    def tokenizer(self) -> Any:
        return self.generator.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.generator.engine.max_model_len

    @property
    def alive(self) -> bool:
        return self.generator.loop.alive

    def asubmit(self, prompt_ids: Sequence[Sequence[int]],
                params: SamplingParams | BeamSearchParams, *, stream: bool = False,
                first_sample: int = 0) -> RequestHandle:
        return self.generator.asubmit(prompt_ids, params, stream=stream,
                                      first_sample=first_sample)

    def validate(self, prompt_ids: Sequence[int],
                 params: SamplingParams | BeamSearchParams) -> None:
        self.generator.engine.validate(list(prompt_ids), params)  # reads no engine state

    async def aprompt_logprobs(self, prompt_ids: Sequence[int], top: int | None = None
                               ) -> PromptLogprobs:
        return await self.generator.aprompt_logprobs(prompt_ids, top)

    async def stats(self) -> EngineSnapshot:
        """Read in the loop's thread, between steps (raises ``EngineDeadError`` once it died)."""
        return await asyncio.to_thread(self.generator.loop.call, LLMEngine.stats,
                                       SNAPSHOT_TIMEOUT_S)

