"""LogitArithmeticGenerator: decode from a combination of two or three models' logits.

Contrastive decoding (expert vs amateur), DExperts (base steered by an expert and an
anti-expert) and proxy tuning (base steered by a small tuned and untuned pair) as one
:class:`~metagen.generators.local.LocalGenerator`: the *main* model (the expert, resp. the base)
runs on the engine loop as usual; the auxiliary models each run on their own
:class:`~metagen.engine.llm_engine.LLMEngine` (own KV cache) in lockstep with it
(:mod:`metagen.engine.lockstep`): the main engine's ``logits_hook`` gets, for the batch of rows
about to be sampled, the auxiliary logits of the same token sequences from one batched step of
each auxiliary engine, and replaces the main logits by their combination
(:mod:`metagen.decoding.logit_arithmetic`). Everything after the hook is the ordinary sampler,
so temperature, truncation, penalties, stops, seeds, ``n > 1`` and constraints apply to the
combined scores, and the completions' logprobs are those of the combined distribution.

The models must share one vocabulary: the same size and, where both engines have a tokenizer,
the same token string for every id; otherwise construction raises ``InvalidParameterError``
naming the model's role and path. Not served (``CapabilityError``): scoring and beam search,
which would use the main model alone; a main or auxiliary engine with a speculator is refused.
Usage counts every model's FLOPs (a row's mirrors are charged to its request). The auxiliary
engines belong to this generator: share them with nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Union

import torch

from metagen.beam_params import BeamSearchParams
from metagen.decoding import SequenceState
from metagen.decoding.logit_arithmetic import (
    check_alpha, check_amateur_temperature, check_beta, check_weight, contrastive_scores, dexperts_logits,
    proxy_tuning_logits,
)
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.lockstep import LockstepLogits
from metagen.engine.outputs import PromptLogprobs
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Capabilities, Prompt
from metagen.generators.local import LocalGenerator
from metagen.types import Completion

ModelSource = Union[LLMEngine, str, Path]
Combine = Callable[[torch.Tensor, Sequence[torch.Tensor]], torch.Tensor]
"""``combine(main_logits (B, V), [aux_logits (B, V), ...]) -> scores (B, V)``."""


class LogitArithmeticGenerator(LocalGenerator):
    """Generator over a main engine and 1-2 auxiliary engines (see the module docstring).

    Prefer the constructors :meth:`contrastive`, :meth:`dexperts` and :meth:`proxy_tuning`;
    ``aux`` is ``[(role, engine), ...]`` and ``combine`` receives their logits in that order."""

    def __init__(self, engine: LLMEngine, aux: Sequence[tuple[str, LLMEngine]],
                 combine: Combine, main_role: str = "base") -> None:
        if not aux:
            raise InvalidParameterError("aux", aux, "needs at least one auxiliary model")
        for role, eng in [(main_role, engine), *aux]:
            if eng.speculator is not None:
                raise InvalidParameterError(role, model_label(eng), "runs a speculator; logit "
                                            "arithmetic needs an engine without one")
        for role, eng in aux:
            check_same_vocabulary(main_role, engine, role, eng)
            if eng.max_model_len < engine.max_model_len:
                raise InvalidParameterError(
                    role, model_label(eng), f"holds {eng.max_model_len} tokens per sequence, "
                    f"fewer than the {main_role} ({engine.max_model_len}); give its engine "
                    "a larger KV cache or max_model_len")
        self.aux_engines = [eng for _, eng in aux]
        self.lockstep = LockstepLogits(engine, self.aux_engines)

        def hook(logits: torch.Tensor, states: Sequence[SequenceState]) -> torch.Tensor:
            return combine(logits, self.lockstep(states))

        super().__init__(engine, logits_hook=hook)

    @classmethod
    def contrastive(cls, expert: ModelSource, amateur: ModelSource, *, alpha: float = 0.1,
                    beta: float | None = None, amateur_temperature: float = 1.0,
                    **engine_options: Any) -> LogitArithmeticGenerator:
        """Contrastive decoding: ``log p_expert - log p_amateur`` over the tokens with
        ``p_expert >= alpha * max p_expert`` (``beta``: the ``(1 + beta) z_e - beta z_a``
        form), the amateur's logits divided by ``amateur_temperature`` first (Li et al. 2023
        use 0.5). Paths are loaded with ``engine_options`` (:class:`EngineConfig` fields)."""
        a, b = check_alpha(alpha), check_beta(beta)
        tau = check_amateur_temperature(amateur_temperature)
        main = _engine(expert, engine_options)
        return cls(main, [("amateur", _engine(amateur, engine_options))],
                   lambda z, aux: contrastive_scores(z, aux[0], a, b, tau), main_role="expert")

    @classmethod
    def dexperts(cls, base: ModelSource, expert: ModelSource, antiexpert: ModelSource, *,
                 alpha: float = 1.0, **engine_options: Any) -> LogitArithmeticGenerator:
        """DExperts: ``z_base + alpha * (z_expert - z_antiexpert)``."""
        w = check_weight("alpha", alpha)
        main = _engine(base, engine_options)
        return cls(main, [("expert", _engine(expert, engine_options)),
                          ("antiexpert", _engine(antiexpert, engine_options))],
                   lambda z, aux: dexperts_logits(z, aux[0], aux[1], w))

    @classmethod
    def proxy_tuning(cls, base: ModelSource, tuned: ModelSource, untuned: ModelSource,
                     **engine_options: Any) -> LogitArithmeticGenerator:
        """Proxy tuning: ``z_base + (z_tuned - z_untuned)``."""
        main = _engine(base, engine_options)
        return cls(main, [("tuned", _engine(tuned, engine_options)),
                          ("untuned", _engine(untuned, engine_options))],
                   lambda z, aux: proxy_tuning_logits(z, aux[0], aux[1]))

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(logits=True, logprobs=True, prompt_scoring=False,
                            prefix_cache=self.engine.radix is not None, constraints=True,
                            seeded=True)

    def score(self, prompts: Sequence[Prompt], continuations: Sequence[Sequence[str]]
              ) -> list[list[float]]:
        raise CapabilityError("LogitArithmeticGenerator does not score: scores would come "
                              "from the main model alone")

    async def aprompt_logprobs(self, prompt_ids: Sequence[int], top: int | None = None
                               ) -> PromptLogprobs:
        raise CapabilityError("LogitArithmeticGenerator does not score prompts: scores would "
                              "come from the main model alone")

    def beam_search(self, prompts: Sequence[Prompt], params: BeamSearchParams, *,
                    timeout: float | None = None) -> list[list[Completion]]:
        raise CapabilityError("LogitArithmeticGenerator has no beam search: beams would see "
                              "the main model's logits alone")


def _engine(source: ModelSource, options: dict[str, Any]) -> LLMEngine:
    if isinstance(source, LLMEngine):
        return source
    return LLMEngine.from_pretrained(Path(source), EngineConfig(**options))


def model_label(engine: LLMEngine) -> str:
    """How errors name an engine's model: its tokenizer's path, else its architecture."""
    path = getattr(engine.tokenizer, "name_or_path", None)
    return str(path) if path else f"<{type(engine.model).__name__} engine>"


def check_same_vocabulary(main_role: str, main: LLMEngine, role: str, other: LLMEngine
                          ) -> None:
    """Raise ``InvalidParameterError`` (parameter ``role``, value the model) unless ``other``
    has ``main``'s vocabulary size and, where both have tokenizers, the same string per id."""
    if other.vocab_size != main.vocab_size:
        raise InvalidParameterError(
            role, model_label(other), f"its vocabulary has {other.vocab_size} entries, the "
            f"{main_role}'s {main.vocab_size}: the models must share one vocabulary")
    if main.tokenizer is None or other.tokenizer is None:
        return
    ours, theirs = main.tokenizer.get_vocab(), other.tokenizer.get_vocab()
    if ours == theirs:
        return
    by_id = {i: t for t, i in ours.items()}
    other_by_id = {i: t for t, i in theirs.items()}
    first = min(i for i in by_id.keys() | other_by_id.keys()
                if by_id.get(i) != other_by_id.get(i))
    raise InvalidParameterError(
        role, model_label(other), f"its tokenizer maps id {first} to "
        f"{other_by_id.get(first)!r}, the {main_role}'s to {by_id.get(first)!r}: the models "
        "must share one vocabulary")
