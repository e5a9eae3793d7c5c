"""``load_prm``: one entry point for the process reward models the field ships.

- ``format=None``: a folder whose head says how to read it -- ``*ForSequenceClassification``,
  ``*ForTokenClassification`` or a causal LM with a TRL value head -- loads as today's
  :class:`~metagen.scorers.HFProcessRewardModel` (score at each step's last token). A plain
  causal LM is refused: a token-probability PRM's layout is not in its weights, so the caller
  must declare it.
- ``format="math-shepherd" | "rlhflow-llama3.1-8b-prm" | "qwen2.5-math-prm"`` (a
  :data:`~metagen.scorers.prm_format.PRM_PRESETS` name) or a :class:`PRMFormat`: a
  :class:`~metagen.scorers.formatted_prm.FormattedPRM` over a causal LM (step-tag, chat-turns,
  generative) or a token classifier (separator).

Raises :class:`ModelLoadError` for a missing folder, a slow tokenizer, a head that does not fit
the format, or an undeclared layout; ``InvalidParameterError`` naming ``format`` for an unknown
preset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metagen.errors import ModelLoadError
from metagen.scorers.base import StepAggregation
from metagen.scorers.formatted_prm import FormattedPRM
from metagen.scorers.hf_reward import HFProcessRewardModel, _on
from metagen.scorers.prm_format import PRM_PRESETS, PRMFormat, resolve_format


def load_prm(path: str | Path, format: str | PRMFormat | None = None, *, device: str = "cpu",
             dtype: Any = None, batch_size: int = 16, aggregation: StepAggregation = "last"
             ) -> HFProcessRewardModel | FormattedPRM:
    """A process reward model from a Hugging Face folder (see the module docstring)."""
    path = Path(path)
    fmt = None if format is None else resolve_format(format)
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"{path}: not a Hugging Face model folder (no config.json)")
    try:
        archs = json.loads((path / "config.json").read_text()).get("architectures") or []
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{path}: unreadable config.json: {exc}") from exc
    classifier = any(a.endswith(("ForSequenceClassification", "ForTokenClassification"))
                     for a in archs)
    if fmt is None:
        if classifier or _has_value_head(path):
            return HFProcessRewardModel.from_pretrained(path, device=device, dtype=dtype,
                                                        batch_size=batch_size,
                                                        aggregation=aggregation)
        raise ModelLoadError(
            f"{path}: a causal LM without a reward head ({', '.join(archs) or 'no architectures'})"
            "; its layout cannot be read from the weights, declare it: load_prm(path, format=one "
            f"of {', '.join(sorted(PRM_PRESETS))} or PRMFormat(kind='step-tag' | 'chat-turns' | "
            "'generative', good_token=..., bad_token=..., step_tag=..., template=...))")
    token_head = any(a.endswith("ForTokenClassification") for a in archs)
    if fmt.kind == "separator" and not token_head:
        raise ModelLoadError(f"{path}: format kind 'separator' needs a *ForTokenClassification "
                             f"model with 2 labels, this folder has {archs}")
    if fmt.kind != "separator" and classifier:
        raise ModelLoadError(f"{path}: format kind {fmt.kind!r} needs a causal LM, this folder "
                             f"has a classification head {archs}; use format=None")
    model, tokenizer = _load(path, fmt, device, dtype)
    if fmt.kind == "separator":
        head = getattr(model, "score", None) or getattr(model, "classifier", None)
        if head is None or not hasattr(head, "weight"):
            raise ModelLoadError(f"{path}: no linear 'score'/'classifier' head on "
                                 f"{type(model).__name__}")
    else:
        head = model.get_output_embeddings()
        if head is None or not hasattr(head, "weight"):
            raise ModelLoadError(f"{path}: {type(model).__name__} has no output embedding")
    return FormattedPRM(model, tokenizer, format=fmt, head=head, batch_size=batch_size,
                        aggregation=aggregation)


def _load(path: Path, fmt: PRMFormat, device: str, dtype: Any) -> tuple[Any, Any]:
    try:
        import transformers as tf
        tokenizer = tf.AutoTokenizer.from_pretrained(path)
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{path}: reward scorers need a fast tokenizer (offsets)")
        kwargs = {"dtype": dtype} if dtype is not None else {}
        auto = tf.AutoModelForTokenClassification if fmt.kind == "separator" \
            else tf.AutoModelForCausalLM
        model = auto.from_pretrained(path, **kwargs)
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"{path}: cannot load reward model: {exc}") from exc
    return _on(model, device), tokenizer


def _has_value_head(path: Path) -> bool:
    from safetensors import safe_open

    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            if "v_head.summary.weight" in f.keys():
                return True
    return False
