"""Reward models the server loads by name at start (``--orm name=PATH``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from metagen.errors import InvalidParameterError, ModelLoadError
from metagen.scorers.base import RewardModel


def parse_named_paths(items: Sequence[str], option: str) -> dict[str, Path]:
    """``["name=PATH", ...]`` -> ``{name: PATH}``; ``InvalidParameterError`` naming ``option``
    for an item without ``=``, an empty name or a repeated name."""
    out: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise InvalidParameterError(option, item, "must be NAME=PATH")
        if name in out:
            raise InvalidParameterError(option, item, f"the name {name!r} is given twice")
        out[name] = Path(path)
    return out


def load_orm(path: Path) -> RewardModel:
    """An outcome reward model from a Hugging Face folder: a causal LM is a generative verifier
    scored by its confidence in the completion (``LikelihoodVerifier``, min token logprob: the
    testbed ORM's convention); any other head is a classifier read at the last token
    (``HFRewardModel``). Raises ``ModelLoadError``."""
    from metagen.scorers import HFRewardModel, LikelihoodVerifier

    config = path / "config.json"
    if not config.is_file():
        raise ModelLoadError(f"{path}: not a Hugging Face model folder (no config.json)")
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError) as exc:
        raise ModelLoadError(f"{config}: unreadable ({exc})") from exc
    if any(str(a).endswith("ForCausalLM") for a in architectures):
        return LikelihoodVerifier.from_pretrained(path)
    model: RewardModel = HFRewardModel.from_pretrained(path)
    return model
