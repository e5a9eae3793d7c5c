"""Loading ``--reward PATH``: the outcome scorer best-of-N and weighted voting read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metagen.errors import ModelLoadError


def load_reward(path: str | Path) -> Any:
    """A reward model from a Hugging Face folder: ``*ForSequenceClassification`` /
    ``*ForTokenClassification`` folders (or a value-head checkpoint, see
    :class:`~metagen.scorers.HFRewardModel`) as a reward model; any other causal LM as a
    generative verifier scored by its confidence (:class:`~metagen.scorers.LikelihoodVerifier`,
    how the testbed's ORM is trained). Raises :class:`ModelLoadError` for a folder without
    ``config.json``."""
    folder = Path(path)
    config = folder / "config.json"
    if not config.is_file():
        raise ModelLoadError(f"{folder}: not a Hugging Face model folder (no config.json)")
    from metagen.scorers.load_prm import has_value_head  # the PRM loader's own check

    archs = json.loads(config.read_text()).get("architectures") or []
    if any(a.endswith("Classification") for a in archs) or has_value_head(folder):
        from metagen.scorers import HFRewardModel
        return HFRewardModel.from_pretrained(folder)
    from metagen.scorers import LikelihoodVerifier
    return LikelihoodVerifier.from_pretrained(folder, batch_size=64)

