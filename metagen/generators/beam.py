"""BeamSearchGenerator: beam search as a :class:`~metagen.generators.base.Generator`.

Wraps a backend that has ``beam_search(prompts, BeamSearchParams) -> list[list[Completion]]``
(:class:`~metagen.generators.local.LocalGenerator`: plain, diverse and stochastic beams inside
the engine's continuous batching; :class:`~metagen.generators.hf.HFGenerator`: transformers'
beam search). ``generate(prompts, params)`` maps ``params.n`` to ``num_return_sequences`` and
``params.max_tokens`` to ``max_tokens`` (``params.seed`` to the stochastic beam's seed,
``params.token_healing`` to the beams' token healing); the beam settings come from the
constructor. Beam search scores raw model log-probabilities, so
every other sampling field must keep its default (a set one raises ``InvalidParameterError``
naming it, rather than being silently ignored). Completions: best first, ``cumulative_logprob``
the beam score, ``logprobs`` None.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields, replace
from typing import Any

from metagen.beam_params import BeamSearchParams, EarlyStopping
from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.base import Capabilities, Prompt
from metagen.types import Completion, SamplingParams, Usage

_USED = {"n", "max_tokens", "seed", "token_healing"}
_DEFAULTS = SamplingParams()


class BeamSearchGenerator:
    """Beam search over ``generator`` (see the module docstring)."""

    def __init__(self, generator: Any, num_beams: int = 4, *, num_beam_groups: int = 1,
                 diversity_penalty: float = 0.0, length_penalty: float = 1.0,
                 early_stopping: EarlyStopping = False, stochastic: bool = False) -> None:
        if not callable(getattr(generator, "beam_search", None)):
            raise CapabilityError(f"{type(generator).__name__} has no beam_search; use "
                                  "LocalGenerator or HFGenerator")
        self.generator = generator
        self.template = BeamSearchParams(
            num_beams=num_beams, num_beam_groups=num_beam_groups,
            diversity_penalty=diversity_penalty, length_penalty=length_penalty,
            early_stopping=early_stopping, stochastic=stochastic)

    @property
    def capabilities(self) -> Capabilities:
        inner = self.generator.capabilities
        return Capabilities(logits=False, logprobs=False, prompt_scoring=False,
                            prefix_cache=inner.prefix_cache, constraints=False, seeded=True,
                            flops=inner.flops)

    @property
    def usage(self) -> Usage:
        return self.generator.usage

    def beam_params(self, params: SamplingParams) -> BeamSearchParams:
        """The beam request for ``params`` (raises for a sampling field beam search ignores)."""
        if not isinstance(params, SamplingParams):
            raise InvalidParameterError("params", params, "must be a SamplingParams")
        for f in fields(SamplingParams):
            if f.name not in _USED and getattr(params, f.name) != getattr(_DEFAULTS, f.name):
                raise InvalidParameterError(
                    f.name, getattr(params, f.name), "is not used by beam search (it scores raw "
                    "log-probabilities); leave it at its default")
        seed = params.seed if self.template.stochastic else None
        return replace(self.template, num_return_sequences=params.n,
                       max_tokens=params.max_tokens, seed=seed,
                       token_healing=params.token_healing)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        """``len(prompts)`` lists of ``params.n`` hypotheses, best first."""
        return self.generator.beam_search(prompts, self.beam_params(params))
