"""``load_prm``: one entry point for the process reward models the field ships.

- ``format=None``: a folder whose head says how to read it -- ``*ForSequenceClassification``,
  ``*ForTokenClassification`` or a causal LM with a TRL value head -- loads as today's
  :class:`~metagen.scorers.HFProcessRewardModel` (score at each step's last token). A plain
  causal LM is refused: a token-probability PRM's layout is not in its weights, so the caller
  must declare it.
- ``format="math-shepherd" | "rlhflow-llama3.1-8b-prm" | "qwen2.5-math-prm"`` (a
  :data:`~metagen.scorers.prm_format.PRM_PRESETS` name) or a :class:`PRMFormat`: a
  :class:`~metagen.scorers.formatted_prm.FormattedPRM` over a causal LM (step-tag, chat-turns,
  generative), or for separator a ``*ForTokenClassification`` model or a
  ``*ForProcessRewardModel`` checkpoint (Qwen2.5-Math-PRM as shipped: its backbone loads with
  ``AutoModel`` and its ``score`` MLP is read from the safetensors, no remote code).

Raises :class:`ModelLoadError` for a missing folder, a slow tokenizer, a head that does not fit
the format, or an undeclared layout; ``InvalidParameterError`` naming ``format`` for an unknown
preset.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from metagen.device import model_on
from metagen.errors import ModelLoadError
from metagen.scorers.base import StepAggregation
from metagen.scorers.formatted_prm import FormattedPRM
from metagen.scorers.hf_reward import HFProcessRewardModel
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
        if classifier or has_value_head(path):
            return HFProcessRewardModel.from_pretrained(path, device=device, dtype=dtype,
                                                        batch_size=batch_size,
                                                        aggregation=aggregation)
        raise ModelLoadError(
            f"{path}: a causal LM without a reward head ({', '.join(archs) or 'no architectures'})"
            "; its layout cannot be read from the weights, declare it: load_prm(path, format=one "
            f"of {', '.join(sorted(PRM_PRESETS))} or PRMFormat(kind='step-tag' | 'chat-turns' | "
            "'generative', good_token=..., bad_token=..., step_tag=..., template=...))")
    token_head = any(a.endswith("ForTokenClassification") for a in archs)
    prm_head = any(a.endswith("ForProcessRewardModel") for a in archs)
    if fmt.kind == "separator" and not (token_head or prm_head):
        raise ModelLoadError(f"{path}: format kind 'separator' needs a *ForTokenClassification "
                             f"or *ForProcessRewardModel model with 2 labels, this folder has "
                             f"{archs}")
    if fmt.kind != "separator" and (classifier or prm_head):
        raise ModelLoadError(f"{path}: format kind {fmt.kind!r} needs a causal LM, this folder "
                             f"has a classification head {archs}; use format=None")
    model, tokenizer = _load(path, fmt, device, dtype, backbone_only=prm_head and not token_head)
    if prm_head and not token_head:
        head = _score_mlp(path, model).to(device)
    elif fmt.kind == "separator":
        head = getattr(model, "score", None) or getattr(model, "classifier", None)
        if head is None or not hasattr(head, "weight"):
            raise ModelLoadError(f"{path}: no linear 'score'/'classifier' head on "
                                 f"{type(model).__name__}")
    else:
        head = model.get_output_embeddings()
        if head is None or not hasattr(head, "weight"):
            raise ModelLoadError(f"{path}: {type(model).__name__} has no output embedding")
    if fmt.kind == "separator":
        _check_two_labels(path, head)
    return FormattedPRM(model, tokenizer, format=fmt, head=head, batch_size=batch_size,
                        aggregation=aggregation)


def _check_two_labels(path: Path, head: Any) -> None:
    """``ModelLoadError`` unless a separator PRM's head (a Linear, or a Sequential ending in one)
    has 2 outputs: its score is ``softmax(head)[1]``, which a one-label head cannot give."""
    import torch

    last = head[-1] if isinstance(head, torch.nn.Sequential) else head
    labels = int(last.get_parameter("weight").shape[0])
    if labels != 2:
        raise ModelLoadError(f"{path}: format kind 'separator' scores softmax(head)[1] and needs "
                             f"a head with 2 labels, this one has {labels}")


def _load(path: Path, fmt: PRMFormat, device: str, dtype: Any, *, backbone_only: bool
          ) -> tuple[Any, Any]:
    try:
        import transformers as tf
        tokenizer = tf.AutoTokenizer.from_pretrained(path)
        if not getattr(tokenizer, "is_fast", False):
            raise ModelLoadError(f"{path}: reward scorers need a fast tokenizer (offsets)")
        kwargs = {"dtype": dtype} if dtype is not None else {}
        auto = tf.AutoModel if backbone_only else tf.AutoModelForTokenClassification \
            if fmt.kind == "separator" else tf.AutoModelForCausalLM
        model = auto.from_pretrained(path, **kwargs)
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as exc:
        raise ModelLoadError(f"{path}: cannot load reward model: {exc}") from exc
    return model_on(model, device), tokenizer


def has_value_head(path: Path) -> bool:
    """Whether the model folder's safetensors hold a value head (a scalar reward head)."""
    from safetensors import safe_open

    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            if "v_head.summary.weight" in f.keys():
                return True
    return False


def _score_mlp(path: Path, model: Any) -> Any:
    """The ``score`` head of a ``*ForProcessRewardModel`` checkpoint (Qwen2.5-Math-PRM's custom
    class, normally loaded with ``trust_remote_code``): ``Linear(H, H) -> ReLU -> Linear(H, 2)``
    stored as ``score.0.*`` and ``score.2.*``, or a single ``score.weight`` Linear. Read from the
    safetensors shards, so no remote code runs."""
    import torch
    from safetensors import safe_open

    tensors: dict[str, Any] = {}
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if key.startswith("score."):
                    tensors[key[len("score."):]] = f.get_tensor(key)

    def linear(prefix: str) -> Any:
        weight = tensors[prefix + "weight"]  # (out, in)
        bias = tensors.get(prefix + "bias")
        layer = torch.nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
        with torch.no_grad():
            layer.weight.copy_(weight)
            if bias is not None:
                layer.bias.copy_(bias)
        return layer

    if "0.weight" in tensors and "2.weight" in tensors:
        head = torch.nn.Sequential(linear("0."), torch.nn.ReLU(), linear("2."))
    elif "weight" in tensors:
        head = torch.nn.Sequential(linear(""))
    else:
        raise ModelLoadError(f"{path}: a *ForProcessRewardModel checkpoint without score.* "
                             "head tensors (expected score.0/score.2 or score.weight)")
    return head.to(next(model.parameters()).dtype)
