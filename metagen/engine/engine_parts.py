"""EngineDrivers: what an :class:`~metagen.engine.llm_engine.LLMEngine` is handed besides its
model -- the collaborators that replace sampling for some rows or drive the engine from outside.

- ``speculator`` (:class:`Speculation`): proposes drafts onto decoding rows before each step's
  schedule, verifies them from the step's all-position logits and emits the accepted tokens
  (:class:`~metagen.engine.speculative_decoding.Speculator`);
- ``beam`` (:class:`BeamDriverFactory`): makes the :class:`~metagen.engine.request_driver.
  RequestDriver` of a :class:`~metagen.beam_params.BeamSearchParams` request
  (:func:`~metagen.engine.beam_search.make_beam_driver`);
- ``scorer`` (:class:`ScorerFactory`): makes the engine's scoring façade
  (:class:`~metagen.engine.engine_scoring.EngineScorer`), behind ``LLMEngine.score`` and friends.

The engine imports none of them: :mod:`metagen.engine.build` assembles the standard bundle from an
:class:`~metagen.engine.config.EngineConfig`. A part left None is a feature the engine lacks: a
request that needs it is refused (``InvalidParameterError``) when it is made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from metagen.beam_params import BeamSearchParams
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.request_driver import RequestDriver
    from metagen.engine.sequence import Sequence as Seq


class Speculation(Protocol):
    """Engine-wide speculative decoding, called by ``LLMEngine.step`` around its phases."""

    def propose(self, engine: LLMEngine) -> None:
        """Before scheduling: append drafts to the running rows it serves."""
        ...

    def fit(self, batch: Sequence[tuple[Seq, int]]) -> None:
        """After scheduling: drop each row's drafts past the tokens scheduled for it."""
        ...

    def verify(self, engine: LLMEngine, rows: Sequence[tuple[Seq, torch.Tensor]]) -> None:
        """After the forward: accept a prefix of each drafted row's drafts (``logits`` of its
        last ``num_draft + 1`` positions) and emit the tokens through ``engine.emit``."""
        ...

    def forget(self, seq: Seq) -> None:
        """Drop what it keeps for the finished sequence ``seq``."""
        ...


class BeamDriverFactory(Protocol):
    """The driver of one beam-search request over ``prompt_ids`` (``healed``: the tokens token
    healing removed from its prompt)."""

    def __call__(self, params: BeamSearchParams, eos_token_ids: tuple[int, ...], tokenizer: Any,
                 prompt_ids: Sequence[int], healed: Sequence[int] = ()) -> RequestDriver: ...


class Scorer(Protocol):
    """Prompt scoring over an engine (see :mod:`metagen.engine.engine_scoring`)."""

    def add_scoring_request(self, tokens: list[int], score_from: int,
                            top: int | None = None) -> str: ...

    def score(self, prompts: Any, continuations: Any, *, errors: Any = "raise"
              ) -> list[list[Any]]: ...

    def score_sequences(self, items: Any, *, errors: Any = "raise", run: Any = None
                        ) -> list[Any]: ...


ScorerFactory = Callable[["LLMEngine"], Scorer]


@dataclass(frozen=True, slots=True)
class EngineDrivers:
    """The parts handed to an engine (see the module docstring); the default has none."""

    speculator: Speculation | None = None
    beam: BeamDriverFactory | None = None
    scorer: ScorerFactory | None = None


__all__ = ["BeamDriverFactory", "EngineDrivers", "Scorer", "ScorerFactory", "Speculation"]
