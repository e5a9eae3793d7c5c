"""BeamSearchParams: how to run one beam-search request (plain, diverse or stochastic).

Validated on construction like :class:`~metagen.types.SamplingParams`: a bad value raises
:class:`~metagen.errors.InvalidParameterError` naming the field. Pure Python (no torch), so the
CLI can check flags before loading anything. Checks that need the model (prompt + ``max_tokens``
within the context, the beams' KV fitting the cache) are made by the engine when the request
arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, Union

from metagen.constraints import check_constraint_fields, constraint_of
from metagen.errors import InvalidParameterError
from metagen.types import MAX_TOKENS_CAP, MAX_WORK_TOKENS, SEED_MAX, check_token_healing

MAX_BEAMS = 64  # cap on beam width (bounds the work and KV one request may ask for)

EarlyStopping = Union[bool, Literal["never"]]


def _check_int(name: str, value: Any, lo: int, hi: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidParameterError(name, value, f"must be an integer in [{lo}, {hi}]")


def _check_finite(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidParameterError(name, value, "must be a finite number")


@dataclass(slots=True, frozen=True)
class BeamSearchParams:
    """A beam-search request.

    - ``num_beams`` (1..64) live beams; ``num_return_sequences`` (<= ``num_beams``) hypotheses
      are returned, best first.
    - ``max_tokens`` bounds the generated tokens of every hypothesis.
    - ``length_penalty``: a finished hypothesis scores ``sum logprob / length ** length_penalty``.
    - ``early_stopping``: True stops once ``num_beams`` hypotheses are finished; False stops when
      the best running beam (scored at the current length) cannot beat the worst finished one;
      "never" uses the best reachable length when ``length_penalty > 0`` (as transformers).
    - ``num_beam_groups`` > 1 (dividing ``num_beams``) with ``diversity_penalty`` > 0 is diverse
      beam search (Vijayakumar et al. 2018).
    - ``stochastic``: stochastic beam search (Kool et al. 2019): ``num_beams`` sequences sampled
      without replacement; ``seed`` makes it reproducible (None: a fresh seed). Not combinable
      with groups.
    - ``regex``, ``json_schema``, ``grammar``, ``choice``: an output constraint, as on
      :class:`~metagen.types.SamplingParams` (see :attr:`constraint`).
    - ``token_healing`` (``True`` = 1, or k in [0, 8]), as on
      :class:`~metagen.types.SamplingParams`: the search runs on the prompt without its last k
      healable tokens and every beam's first token(s) re-produce their text; a hypothesis's text
      starts where the prompt ended, its ``token_ids`` include the healed tokens. Not combinable
      with an output constraint.

    Scores are raw model log-probabilities (no temperature, truncation or penalties); the healed
    tokens' are the model's own, not renormalized over the tokens that heal.
    """

    num_beams: int
    max_tokens: int = 256
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    early_stopping: EarlyStopping = False
    num_beam_groups: int = 1
    diversity_penalty: float = 0.0
    stochastic: bool = False
    seed: int | None = None
    regex: str | None = None
    json_schema: Mapping[str, Any] | str | None = None
    grammar: str | None = None
    choice: tuple[str, ...] | None = None
    token_healing: bool | int = False

    def __post_init__(self) -> None:
        _check_int("num_beams", self.num_beams, 1, MAX_BEAMS)
        _check_int("max_tokens", self.max_tokens, 1, MAX_TOKENS_CAP)
        _check_int("num_return_sequences", self.num_return_sequences, 1, MAX_BEAMS)
        if self.num_return_sequences > self.num_beams:
            raise InvalidParameterError("num_return_sequences", self.num_return_sequences,
                                        f"must not exceed num_beams={self.num_beams}")
        _check_int("num_beam_groups", self.num_beam_groups, 1, MAX_BEAMS)
        if self.num_beams % self.num_beam_groups:
            raise InvalidParameterError("num_beam_groups", self.num_beam_groups,
                                        f"must divide num_beams={self.num_beams}")
        _check_finite("length_penalty", self.length_penalty)
        _check_finite("diversity_penalty", self.diversity_penalty)
        if self.diversity_penalty < 0:
            raise InvalidParameterError("diversity_penalty", self.diversity_penalty, "must be >= 0")
        if self.early_stopping not in (True, False, "never") or (
                isinstance(self.early_stopping, int) and not isinstance(self.early_stopping, bool)):
            raise InvalidParameterError("early_stopping", self.early_stopping,
                                        "must be True, False or 'never'")
        if not isinstance(self.stochastic, bool):
            raise InvalidParameterError("stochastic", self.stochastic, "must be a bool")
        if self.stochastic and self.num_beam_groups > 1:
            raise InvalidParameterError("num_beam_groups", self.num_beam_groups,
                                        "stochastic beam search has one group")
        if self.seed is not None:
            _check_int("seed", self.seed, 0, SEED_MAX)
        if self.num_beams * self.max_tokens > MAX_WORK_TOKENS:
            raise InvalidParameterError(
                "num_beams", self.num_beams, f"num_beams * max_tokens exceeds the work cap "
                f"{MAX_WORK_TOKENS}")
        check_constraint_fields(self)
        check_token_healing(self.token_healing, self.constraint)

    @property
    def constraint(self) -> tuple[str, Any] | None:
        """``(field, value)`` of the output constraint, or ``None``: as on
        :class:`~metagen.types.SamplingParams`, every beam stays in the language, and beam scores
        are log-probabilities renormalized over the tokens the language allows."""
        return constraint_of(self)

    @property
    def heal_tokens(self) -> int:
        """How many prompt tokens token healing may back up over (0: off)."""
        return int(self.token_healing)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict of every field."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


__all__ = ["MAX_BEAMS", "BeamSearchParams", "EarlyStopping"]
