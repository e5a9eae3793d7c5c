"""``resolve_scorer``: the ONE place a scorer spec becomes a scorer, for ``metagen eval``,
``metagen demo`` and ``metagen serve`` alike (the grammar: :mod:`metagen.scorers.scorer_spec`).

What each kind loads:

- a folder as an outcome reward (:func:`load_reward_folder`): ``*ForSequenceClassification`` /
  ``*ForTokenClassification`` or a causal LM whose safetensors hold a TRL value head ->
  :class:`~metagen.scorers.HFRewardModel`; any other causal LM -> a generative verifier scored
  by its confidence in the completion, its weakest token
  (:class:`~metagen.scorers.LikelihoodVerifier`: how the testbed ORM is trained and read);
- a folder whose config declares a ``ConfidenceHeadPRM`` (either role):
  :class:`~metagen.scorers.confidence_head.ConfidenceHeadPRM`, a logistic step-value head over
  the confidences of the LMs it names;
- a folder as a PRM: :func:`~metagen.scorers.load_prm` (head-readable layouts; ``PRESET+FOLDER``
  its declared layouts);
- ``likelihood``: :class:`~metagen.scorers.LikelihoodVerifier` over the folder (bare: the
  caller's ``default_folder``), as an outcome reward or a PRM (its step confidence);
- ``judge+FOLDER``: :class:`~metagen.scorers.LMJudge` over the folder's model (transformers);
- ``likelihood+URL?model=NAME``: :class:`~metagen.scorers.remote_likelihood.
  RemoteLikelihoodVerifier` (the served causal LM's confidence, from echoed log-probs);
- ``API+URL?...``: :class:`~metagen.scorers.RemoteRewardModel` /
  :class:`~metagen.scorers.RemoteProcessRewardModel` with the query's keywords;
- ``unit-tests``: the caller's ``unit_tests()`` (only ``metagen eval`` on a code task has one).

Errors: ``InvalidParameterError`` naming ``flag`` for a spec that is none of these (with the
accepted forms) or that the surface cannot serve (a bare ``likelihood`` without a default, the
unit tests without a code task); ``ModelLoadError`` for a missing or unloadable folder.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.scorers.confidence_head import ConfidenceHeadPRM, is_confidence_head
from metagen.scorers.scorer_spec import (
    Role, ScorerSpec, accepted_forms, canonical_spec, parse_scorer_spec)

LIKELIHOOD_BATCH = 64  # the verifier's rows per forward pass (as the eval and demo loaded it)
HEAD_BATCH = PRM_BATCH = 16  # the reward heads' and PRMs' default rows per forward pass


def resolve_scorer(spec: str | ScorerSpec, role: Role, *, flag: str,
                   default_folder: str | Path | None = None, batch_size: int | None = None,
                   unit_tests: Callable[[], Any] | None = None) -> Any:
    """The scorer ``spec`` names for ``role`` (see the module docstring); ``batch_size`` (None:
    each scorer's default) goes to local scorers."""
    parsed = spec if isinstance(spec, ScorerSpec) else parse_scorer_spec(spec, role, flag)
    if parsed.kind == "unit-tests":
        if unit_tests is None:
            raise InvalidParameterError(flag, "unit-tests", "the unit tests are a reward of "
                                        "metagen eval on a code task (humaneval, mbpp)")
        return unit_tests()
    if parsed.kind == "remote":
        return _remote(parsed, role, flag)
    if parsed.remote_likelihood:
        from metagen.scorers.remote_likelihood import RemoteLikelihoodVerifier

        assert parsed.target is not None
        return RemoteLikelihoodVerifier(parsed.target, **parsed.kwargs)  # type: ignore[arg-type]
    folder = parsed.target if parsed.target is not None else default_folder
    if folder is None:
        raise InvalidParameterError(flag, "likelihood", "bare likelihood needs a default model "
                                    "(a local policy); give likelihood+FOLDER. Accepted forms: "
                                    f"{accepted_forms(role)}")
    path = _folder(folder)
    if parsed.kind == "likelihood":
        from metagen.scorers.likelihood import LikelihoodVerifier
        return LikelihoodVerifier.from_pretrained(path, batch_size=batch_size or LIKELIHOOD_BATCH)
    if parsed.kind == "judge":
        from metagen.generators.loading import load_generator
        from metagen.scorers.judge import LMJudge
        return LMJudge(load_generator("hf", str(path))[1])
    if role == "prm":
        if parsed.format is None and is_confidence_head(path):
            return ConfidenceHeadPRM.from_folder(path, batch_size=batch_size or LIKELIHOOD_BATCH)
        from metagen.scorers.load_prm import load_prm
        return load_prm(path, parsed.format, batch_size=batch_size or PRM_BATCH)
    return load_reward_folder(path, batch_size)


def resolve_reward(spec: str | ScorerSpec, *, flag: str = "reward", **kwargs: Any) -> Any:
    """:func:`resolve_scorer` for an outcome reward."""
    return resolve_scorer(spec, "reward", flag=flag, **kwargs)


def resolve_prm(spec: str | ScorerSpec, *, flag: str = "prm", **kwargs: Any) -> Any:
    """:func:`resolve_scorer` for a process reward model."""
    return resolve_scorer(spec, "prm", flag=flag, **kwargs)


def load_reward_folder(path: str | Path, batch_size: int | None = None) -> Any:
    """An outcome reward model from a Hugging Face folder: a classification head or a
    value-head checkpoint -> :class:`~metagen.scorers.HFRewardModel`; any other causal LM ->
    :class:`~metagen.scorers.LikelihoodVerifier` (min token logprob of the completion).
    ``ModelLoadError`` for a folder without a readable ``config.json``."""
    folder = _folder(path)
    if is_confidence_head(folder):
        return ConfidenceHeadPRM.from_folder(folder, batch_size=batch_size or LIKELIHOOD_BATCH)
    try:
        archs = json.loads((folder / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelLoadError(f"{folder / 'config.json'}: unreadable ({exc})") from exc
    from metagen.scorers.load_prm import has_value_head

    if any(str(a).endswith("Classification") for a in archs) or has_value_head(folder):
        from metagen.scorers.hf_reward import HFRewardModel
        return HFRewardModel.from_pretrained(folder, batch_size=batch_size or HEAD_BATCH)
    from metagen.scorers.likelihood import LikelihoodVerifier
    return LikelihoodVerifier.from_pretrained(folder, batch_size=batch_size or LIKELIHOOD_BATCH)


def _folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ModelLoadError(f"{folder}: no such model folder")
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder}: not a Hugging Face model folder (no config.json)")
    return folder


def _remote(spec: ScorerSpec, role: Role, flag: str) -> Any:
    """The remote scorer; a keyword its constructor refuses is re-raised naming ``flag`` and
    the key."""
    from metagen.scorers.remote_prm import RemoteProcessRewardModel
    from metagen.scorers.remote_reward import RemoteRewardModel

    kwargs: dict[str, Any] = dict(spec.kwargs)
    if "labels" in kwargs:
        kwargs["labels"] = list(kwargs["labels"])
    assert spec.target is not None and spec.api is not None
    cls = RemoteProcessRewardModel if role == "prm" else RemoteRewardModel
    try:
        return cls(spec.target, api=spec.api, **kwargs)
    except InvalidParameterError as exc:
        raise InvalidParameterError(flag, canonical_spec(spec), f"key {exc.param!r}: "
                                    f"{exc.reason}") from None
