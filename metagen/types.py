"""Public value types: SamplingParams, Completion, Usage, Result.

All are slotted dataclasses. :class:`SamplingParams` validates itself on construction and raises
:class:`~metagen.errors.InvalidParameterError` (a ``ValueError``) naming the field and the value
for every bad-input case that concerns its fields. Checks that need the model
(token ids against the vocabulary, prompt + max_tokens against the context) are made by the backend
when a request arrives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from metagen.errors import InvalidParameterError

# Caps that bound the work one request may ask for (V7, V9, V11, V13, V25).
MAX_N = 1024
MAX_TOKENS_CAP = 1_000_000
MAX_WORK_TOKENS = 16_000_000  # n * max_tokens
MAX_LOGPROBS = 20
MAX_STOP_STRINGS = 64
MAX_STOP_STRING_CHARS = 1024
MAX_ID_LIST = 1_000_000
LOGIT_BIAS_LIMIT = 100.0
GREEDY_TEMPERATURE = 1e-5  # temperatures below this are greedy (as in vLLM)
SEED_MAX = 2**63 - 1
MAX_HEAL_TOKENS = 8  # prompt tokens token healing may back up over

FinishReason = Literal["stop", "length", "abort", "error"]


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_real(name: str, value: Any, lo: float, hi: float, *, lo_open: bool = False,
                hi_open: bool = False) -> float:
    if not _is_number(value):
        raise InvalidParameterError(name, value, "must be a number (bool and str are not numbers)")
    if not math.isfinite(value):
        raise InvalidParameterError(name, value, "must be finite")
    below = value <= lo if lo_open else value < lo
    above = value >= hi if hi_open else value > hi
    if below or above:
        left, right = ("(" if lo_open else "["), (")" if hi_open else "]")
        raise InvalidParameterError(name, value, f"must be in {left}{lo}, {hi}{right}")
    return float(value)


def _check_int(name: str, value: Any, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidParameterError(name, value, "must be an integer")
    if not lo <= value <= hi:
        raise InvalidParameterError(name, value, f"must be in [{lo}, {hi}]")
    return value


def check_token_healing(value: Any, constraint: tuple[str, Any] | None) -> None:
    """``token_healing`` is a bool or an integer in [0, MAX_HEAL_TOKENS], and off when an
    output ``constraint`` is set; else :class:`InvalidParameterError` naming it."""
    if not isinstance(value, bool):
        _check_int("token_healing", value, 0, MAX_HEAL_TOKENS)
    if value and constraint is not None:
        raise InvalidParameterError(
            "token_healing", value, f"cannot be combined with an output constraint "
            f"({constraint[0]}): the healed tokens re-produce prompt text")


def _check_ids(name: str, value: Any, *, allow_empty: bool) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidParameterError(name, value, "must be a sequence of token ids")
    if len(value) > MAX_ID_LIST:
        raise InvalidParameterError(name, f"<{len(value)} ids>", f"at most {MAX_ID_LIST} ids")
    if not value and not allow_empty:
        raise InvalidParameterError(name, value, "must not be empty")
    for tok in value:
        if not isinstance(tok, int) or isinstance(tok, bool) or tok < 0:
            raise InvalidParameterError(name, tok, "token ids must be non-negative integers")
    return tuple(value)


@dataclass(slots=True, frozen=True)
class SamplingParams:
    """How to decode one request. Validated on construction.

    Semantics (the same on every backend):

    - ``temperature`` 0 (or below 1e-5) is greedy decoding; ``n > 1`` with greedy is rejected,
      since N identical samples would be counted as N votes (V8).
    - ``top_k`` 0 or -1 disables top-k; values above the vocabulary are clamped to it.
    - ``top_p``, ``typical_p`` in (0, 1]; 1 disables. ``min_p`` in [0, 1]; 0 disables.
    - ``epsilon_cutoff`` in [0, 1), ``eta_cutoff`` in [0, 1); 0 disables.
    - ``mirostat_tau`` (target surprise, in nats) enables Mirostat v2 with learning rate
      ``mirostat_eta``; it replaces the truncation samplers for that request.
    - ``repetition_penalty`` (CTRL / transformers: > 0, 1 disables) applies over prompt and
      output; ``presence_penalty`` and ``frequency_penalty`` (OpenAI: [-2, 2]) over the output.
    - ``logit_bias`` maps token id -> additive bias; values are clamped to [-100, 100].
    - ``bad_words`` are strings the output's text may never contain, however they would be
      tokenized (a token is removed when the text so far plus its text would contain one):
      case-sensitive, also inside longer words; the prompt's text does not count, a stop string
      does (:mod:`metagen.decoding.bad_text`). ``allowed_token_ids`` restricts sampling to a set.
    - ``max_tokens`` >= 1; ``min_tokens`` <= ``max_tokens`` suppresses EOS and stop tokens.
    - ``stop`` strings end a completion and are not included in its text.
    - ``seed`` makes sample ``i``'s random draws a pure function of (seed, i), whatever else is
      in the batch; the sample itself is then fixed up to the logits' float32 rounding, which
      may differ with the prefix cache's state, the batch and the thread count unless the
      engine is deterministic (``EngineConfig.deterministic``: bit for bit). ``None`` or -1
      means random.
    - ``logprobs`` k >= 0 returns the top-k alternatives of the model's own distribution per token.
    - ``regex``, ``json_schema`` (dict or JSON string), ``grammar`` (Lark) and ``choice`` (a list
      of strings) constrain the output to a language; at most one may be set, and a malformed one
      is rejected here naming the field (V19; :mod:`metagen.constraints`). EOS is allowed only
      where the language accepts.
    - ``token_healing`` (``True`` = 1, or an integer k in [0, 8]) backs up over the prompt's last
      k tokens (fewer before a special or byte token) and constrains the first generated tokens
      to re-produce their text (:mod:`metagen.decoding.healing`). The completion's ``text``
      starts where the prompt ended (the re-produced text is not repeated); its ``token_ids``
      and ``logprobs`` include the healed tokens, whose text straddles the prompt's end. Not
      combinable with an output constraint.
    """

    n: int = 1
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    typical_p: float = 1.0
    epsilon_cutoff: float = 0.0
    eta_cutoff: float = 0.0
    mirostat_tau: float | None = None
    mirostat_eta: float = 0.1
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    no_repeat_ngram_size: int = 0
    logit_bias: Mapping[int, float] | None = None
    allowed_token_ids: tuple[int, ...] | None = None
    bad_words: tuple[str, ...] = ()
    max_tokens: int = 256
    min_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    seed: int | None = None
    logprobs: int | None = None
    regex: str | None = None
    json_schema: Mapping[str, Any] | str | None = None
    grammar: str | None = None
    choice: tuple[str, ...] | None = None
    token_healing: bool | int = False

    def __post_init__(self) -> None:
        put = object.__setattr__
        _check_int("n", self.n, 1, MAX_N)
        put(self, "temperature", _check_real("temperature", self.temperature, 0.0, 1e6))
        if self.n > 1 and self.is_greedy:
            raise InvalidParameterError(
                "n", self.n, "n > 1 with temperature 0 gives n identical samples; "
                "set temperature > 0")
        _check_int("top_k", self.top_k, -1, 2**62)
        put(self, "top_p", _check_real("top_p", self.top_p, 0.0, 1.0, lo_open=True))
        put(self, "min_p", _check_real("min_p", self.min_p, 0.0, 1.0))
        put(self, "typical_p", _check_real("typical_p", self.typical_p, 0.0, 1.0, lo_open=True))
        put(self, "epsilon_cutoff",
            _check_real("epsilon_cutoff", self.epsilon_cutoff, 0.0, 1.0, hi_open=True))
        put(self, "eta_cutoff", _check_real("eta_cutoff", self.eta_cutoff, 0.0, 1.0, hi_open=True))
        if self.mirostat_tau is not None:
            put(self, "mirostat_tau",
                _check_real("mirostat_tau", self.mirostat_tau, 0.0, 100.0, lo_open=True))
        put(self, "mirostat_eta",
            _check_real("mirostat_eta", self.mirostat_eta, 0.0, 1.0, lo_open=True))
        put(self, "repetition_penalty",
            _check_real("repetition_penalty", self.repetition_penalty, 0.0, 100.0, lo_open=True))
        put(self, "presence_penalty",
            _check_real("presence_penalty", self.presence_penalty, -2.0, 2.0))
        put(self, "frequency_penalty",
            _check_real("frequency_penalty", self.frequency_penalty, -2.0, 2.0))
        _check_int("no_repeat_ngram_size", self.no_repeat_ngram_size, 0, 1024)
        self._check_logit_bias()
        if self.allowed_token_ids is not None:
            put(self, "allowed_token_ids",
                _check_ids("allowed_token_ids", self.allowed_token_ids, allow_empty=False))
        put(self, "bad_words", self._check_strings("bad_words", self.bad_words))
        _check_int("max_tokens", self.max_tokens, 1, MAX_TOKENS_CAP)
        _check_int("min_tokens", self.min_tokens, 0, MAX_TOKENS_CAP)
        if self.min_tokens > self.max_tokens:
            raise InvalidParameterError(
                "min_tokens", self.min_tokens, f"must not exceed max_tokens={self.max_tokens}")
        if self.n * self.max_tokens > MAX_WORK_TOKENS:
            raise InvalidParameterError(
                "n", self.n, f"n * max_tokens = {self.n * self.max_tokens} exceeds the work cap "
                f"{MAX_WORK_TOKENS}")
        put(self, "stop", self._check_strings("stop", self.stop))
        put(self, "stop_token_ids",
            _check_ids("stop_token_ids", self.stop_token_ids, allow_empty=True))
        if not isinstance(self.ignore_eos, bool):
            raise InvalidParameterError("ignore_eos", self.ignore_eos, "must be a bool")
        if self.seed is not None:
            _check_int("seed", self.seed, -1, SEED_MAX)
            if self.seed == -1:
                put(self, "seed", None)
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        self._check_constraint()
        check_token_healing(self.token_healing, self.constraint)

    @property
    def heal_tokens(self) -> int:
        """How many prompt tokens token healing may back up over (0: off)."""
        return int(self.token_healing)

    def _check_constraint(self) -> None:
        if self.regex is None and self.json_schema is None and self.grammar is None \
                and self.choice is None:
            return
        from metagen import constraints  # llguidance stays optional and unimported until used
        constraints.check_constraint_fields(self)

    @property
    def constraint(self) -> tuple[str, Any] | None:
        """``(field, value)`` of the output constraint, or ``None`` (see the class docstring)."""
        from metagen.constraints import constraint_of
        return constraint_of(self)

    def _check_logit_bias(self) -> None:
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, Mapping):
            raise InvalidParameterError("logit_bias", self.logit_bias, "must map token id -> bias")
        if len(self.logit_bias) > MAX_ID_LIST:
            raise InvalidParameterError("logit_bias", f"<{len(self.logit_bias)} entries>",
                                        "too many entries")
        clean: dict[int, float] = {}
        for key, value in self.logit_bias.items():
            if not isinstance(key, int) or isinstance(key, bool) or key < 0:
                raise InvalidParameterError("logit_bias", key, "keys must be token ids (int >= 0)")
            bias = _check_real("logit_bias", value, -math.inf, math.inf)
            clean[key] = min(max(bias, -LOGIT_BIAS_LIMIT), LOGIT_BIAS_LIMIT)
        object.__setattr__(self, "logit_bias", clean)

    @staticmethod
    def _check_strings(name: str, value: Any) -> tuple[str, ...]:
        if isinstance(value, str):
            value = (value,)
        if not isinstance(value, Sequence):
            raise InvalidParameterError(name, value, "must be a string or a list of strings")
        if len(value) > MAX_STOP_STRINGS:
            raise InvalidParameterError(name, f"<{len(value)} strings>",
                                        f"at most {MAX_STOP_STRINGS} strings")
        for item in value:
            if not isinstance(item, str):
                raise InvalidParameterError(name, item, "must be a string")
            if not item:
                raise InvalidParameterError(name, item, "must not be empty")
            if len(item) > MAX_STOP_STRING_CHARS:
                raise InvalidParameterError(name, item[:32] + "...",
                                            f"at most {MAX_STOP_STRING_CHARS} characters")
        return tuple(value)

    @property
    def is_greedy(self) -> bool:
        """True when decoding takes the argmax (temperature below 1e-5)."""
        return self.temperature < GREEDY_TEMPERATURE

    def with_(self, **changes: Any) -> SamplingParams:
        """A validated copy with some fields changed."""
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict of every field (for provenance and resume keys)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, Mapping):
                value = {str(k): v for k, v in value.items()}
            out[f.name] = value
        return out


@dataclass(slots=True, frozen=True)
class Completion:
    """One generated continuation.

    ``logprobs[i]`` is the log-probability of ``token_ids[i]`` under the model's own distribution
    (before sampling transforms); ``top_logprobs[i]`` maps the k most likely token ids at step i to
    their log-probabilities when ``SamplingParams.logprobs`` was set. ``stop_reason`` is the stop
    string or token id that ended the completion, if any. ``generated_tokens`` is the server's
    count for a completion whose token ids are unknown (a remote backend that does not return
    them); :attr:`num_tokens` is what strategies count.
    """

    text: str
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] | None = None
    cumulative_logprob: float | None = None
    finish_reason: FinishReason = "length"
    top_logprobs: tuple[dict[int, float], ...] | None = None
    stop_reason: str | int | None = None
    generated_tokens: int | None = None

    @property
    def num_tokens(self) -> int:
        """Generated tokens: ``len(token_ids)`` when known, else the server's count, else the
        number of logprobs, else 0."""
        if self.token_ids:
            return len(self.token_ids)
        if self.generated_tokens is not None:
            return self.generated_tokens
        return len(self.logprobs) if self.logprobs is not None else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "logprobs": None if self.logprobs is None else list(self.logprobs),
            "cumulative_logprob": self.cumulative_logprob,
            "finish_reason": self.finish_reason,
            "stop_reason": self.stop_reason,
            "num_tokens": self.num_tokens,
            "top_logprobs": None if self.top_logprobs is None else [
                {str(k): v for k, v in d.items()} for d in self.top_logprobs],
        }


@dataclass(slots=True, frozen=True)
class Usage:
    """Compute spent by a call or a whole strategy run; ``a + b`` adds field by field.

    ``cached_prompt_tokens`` counts prompt tokens served from a prefix cache (a subset of
    ``prompt_tokens``). FLOPs are estimates: 2 x parameters x tokens plus attention. FLOPs that a
    backend cannot know (a remote server whose parameter count was not declared) are NaN, never
    0; NaN propagates through ``+`` and ``-``, so a total that includes them is unknown too
    (:attr:`flops_known`).
    """

    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    scorer_tokens: int = 0
    calls: int = 0
    scorer_calls: int = 0
    generator_flops: float = 0.0
    scorer_flops: float = 0.0
    wall_time: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def __sub__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    @property
    def flops(self) -> float:
        """Generator plus scorer FLOPs."""
        return self.generator_flops + self.scorer_flops

    @property
    def flops_known(self) -> bool:
        """False when some FLOPs in this total were unknown (NaN)."""
        return not math.isnan(self.flops)

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens actually computed (not served from cache)."""
        return self.prompt_tokens - self.cached_prompt_tokens

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class Result:
    """What a strategy returns: the chosen output, every candidate and its score, the compute.

    ``trace`` is JSON-serialisable (candidates' answers, votes, the search tree, ...);
    ``stopped_by_budget`` is True when a :class:`Budget` ended the run early, in which case
    ``best`` is the best found so far. ``failures`` maps a failure reason to its count.
    """

    best: Completion | None
    candidates: list[Completion] = field(default_factory=list)
    scores: list[float | None] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    trace: dict[str, Any] = field(default_factory=dict)
    stopped_by_budget: bool = False
    failures: dict[str, int] = field(default_factory=dict)

    @property
    def text(self) -> str:
        """The best completion's text ('' when there is none)."""
        return "" if self.best is None else self.best.text
