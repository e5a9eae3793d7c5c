"""A process reward model learned over causal LMs' confidences: a logistic step-value head.

Classifier reward models trained on a small model's own samples can learn which *problems* are
hard without learning which of a problem's solutions is right; an independently trained LM's
confidence in each token does separate a problem's right and wrong solutions (a slip is a token
it finds unlikely). :class:`ConfidenceHeadPRM` keeps that signal and learns only how to weigh it:

- per step ``i`` of a chain and per scoring LM (a :class:`~metagen.scorers.LikelihoodVerifier`),
  the features :data:`FEATURES` of the completion's token log-probabilities under that LM:
  ``run_min`` / ``run_mean`` over the tokens so far (the prefix's weakest token and its mean
  log-prob) and ``step_min`` / ``step_mean`` over step ``i``'s own tokens (a step with no token
  of its own takes its run's values);
- the step score ``sigmoid(bias + sum_k w_k . features_k)`` (:func:`head_score`), weights
  fitted to Monte-Carlo step values (Math-Shepherd: the fraction of policy rollouts from the
  prefix that reach the right answer), see :mod:`metagen.testbed.train_head`.

A folder holds the head: ``config.json`` with ``"architectures": ["ConfidenceHeadPRM"]``,
``"scorers"`` (the LM folders, relative to the head's folder or absolute), ``"features"``
(:data:`FEATURES`, in order), ``"weights"`` (one list per scorer) and ``"bias"``. As an outcome
reward the score of a completion is its last step's score (steps: lines,
:func:`~metagen.scorers.split_steps`). Compute: each LM's forward pass per row, in ``usage``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.generators.base import Prompt
from metagen.generators.flops import FlopModel, flop_model_of
from metagen.scorers.base import check_same_length
from metagen.scorers.callables import check_scores
from metagen.scorers.hf_reward import split_steps
from metagen.scorers.likelihood import LikelihoodVerifier
from metagen.types import Usage

ARCHITECTURE = "ConfidenceHeadPRM"
FEATURES = ("run_min", "run_mean", "step_min", "step_mean")


def step_features(chain: Sequence[Sequence[float]]) -> list[list[float]]:
    """:data:`FEATURES` of each step of one chain, from its steps' token log-probs (the first
    step must hold a token)."""
    if not chain or not chain[0]:
        raise InvalidParameterError("chain", chain, "the first step needs at least one token")
    rows, low, total, count = [], math.inf, 0.0, 0
    for step in chain:
        for v in step:
            low, total, count = min(low, v), total + v, count + 1
        run_min, run_mean = low, total / count
        own = (min(step), sum(step) / len(step)) if step else (run_min, run_mean)
        rows.append([run_min, run_mean, *own])
    return rows


def head_score(features: Sequence[float], weights: Sequence[float], bias: float) -> float:
    """``sigmoid(bias + weights . features)``, overflow-safe."""
    z = bias + math.fsum(w * f for w, f in zip(weights, features, strict=True))
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def is_confidence_head(folder: str | Path) -> bool:
    """Whether ``folder``'s ``config.json`` declares a :class:`ConfidenceHeadPRM`."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("architectures") == [ARCHITECTURE]


def write_head(folder: str | Path, scorers: Sequence[str], weights: Sequence[Sequence[float]],
               bias: float, **extra: Any) -> Path:
    """Write a head folder (``extra``: provenance keys kept in the config)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": [ARCHITECTURE], "scorers": list(scorers),
              "features": list(FEATURES), "weights": [list(map(float, w)) for w in weights],
              "bias": float(bias), **extra}
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


class ConfidenceHeadPRM:
    """Step scores of a logistic head over scoring LMs' confidence features (module doc)."""

    def __init__(self, verifiers: Sequence[LikelihoodVerifier],
                 weights: Sequence[Sequence[float]], bias: float) -> None:
        if not verifiers or len(weights) != len(verifiers) or any(
                len(w) != len(FEATURES) for w in weights):
            raise InvalidParameterError("weights", weights, f"need one list of {len(FEATURES)} "
                                        f"weights ({', '.join(FEATURES)}) per scoring LM "
                                        f"({len(verifiers)})")
        if not all(math.isfinite(v) for w in weights for v in w) or not math.isfinite(bias):
            raise InvalidParameterError("weights", weights, "weights and bias must be finite")
        self.verifiers = list(verifiers)
        self.weights = [list(w) for w in weights]
        self.bias = float(bias)

    @classmethod
    def from_folder(cls, folder: str | Path, *, batch_size: int = 64) -> ConfidenceHeadPRM:
        """Load a head folder and its scoring LMs; ``ModelLoadError`` when it cannot."""
        folder = Path(folder)
        try:
            config = json.loads((folder / "config.json").read_text())
            scorers, weights, bias = config["scorers"], config["weights"], config["bias"]
            features = config["features"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelLoadError(f"{folder}: not a confidence-head folder ({exc})") from exc
        if list(features) != list(FEATURES):
            raise ModelLoadError(f"{folder}: features {features} are not {list(FEATURES)}")
        verifiers = [LikelihoodVerifier.from_pretrained(folder / s, batch_size=batch_size)
                     for s in scorers]
        return cls(verifiers, weights, bias)

    @property
    def flop_model(self) -> FlopModel | None:
        """The LMs' passes over the same tokens as one :class:`FlopModel`: a pass's FLOPs are
        linear in the matmul parameters and in layers x attention width, so the sums (as one
        layer) count both passes exactly. None when an LM's model cannot be counted."""
        models = [getattr(v, "model", None) for v in self.verifiers]
        if any(m is None or not hasattr(m, "config") for m in models):
            return None
        parts = [flop_model_of(m) for m in models]
        return FlopModel(matmul_params=sum(p.matmul_params for p in parts), layers=1,
                         attn_dim=sum(p.layers * p.attn_dim for p in parts))

    @property
    def usage(self) -> Usage:
        """The scoring LMs' usage, added."""
        return sum((v.usage for v in self.verifiers), Usage())

    def features(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                 ) -> list[list[list[float]]]:
        """Per chain, per step: the features of every scoring LM, concatenated in order."""
        per_lm = [[step_features(c) for c in v.step_logprobs(prompts, steps)]
                  for v in self.verifiers]
        return [[sum((lm[r][i] for lm in per_lm), []) for i in range(len(steps[r]))]
                for r in range(len(steps))]

    def score_steps(self, prompts: Sequence[Prompt], steps: Sequence[Sequence[str]]
                    ) -> list[list[float]]:
        flat = sum(self.weights, [])
        return [check_scores([head_score(f, flat, self.bias) for f in chain], len(chain),
                             who="ConfidenceHeadPRM")
                for chain in self.features(prompts, steps)]

    def score(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        check_same_length(prompts, completions, "completions")
        chains = [split_steps(c) or [c] for c in completions]
        return [s[-1] for s in self.score_steps(prompts, chains)]
