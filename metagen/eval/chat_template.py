"""Which prompt form a run takes when none is asked: chat for a model that has a chat template.

:func:`resolve_prompt_format` is decided before any model is loaded, from the model folder's
files (:func:`has_chat_template`: no tokenizer is built, nothing is downloaded). A server's
model (``--base-url``) is not seen from here: its runs are in text form unless chat is asked
(then the server renders its own template at ``/v1/chat/completions``; one without a template
fails each sample).
"""

from __future__ import annotations

import json
from pathlib import Path

from metagen.errors import InvalidParameterError
from metagen.eval.task_form import check_prompt_format
from metagen.eval.tasks import CHAT, TEXT


def has_chat_template(folder: str | Path) -> bool:
    """Whether the model folder's tokenizer has a chat template: a non-empty ``chat_template``
    in ``tokenizer_config.json`` or ``chat_template.json``, or a ``chat_template.jinja`` file
    (where transformers saves it). False for a folder that does not exist or cannot be read."""
    root = Path(folder)
    jinja = root / "chat_template.jinja"
    if jinja.is_file() and jinja.read_text(errors="replace").strip():
        return True
    for name in ("tokenizer_config.json", "chat_template.json"):
        try:
            config = json.loads((root / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(config, dict) and config.get("chat_template"):
            return True
    return False


def resolve_prompt_format(requested: str | None, model_folder: str | Path | None) -> str:
    """The run's prompt form: ``requested`` when given; else ``chat`` for a local
    ``model_folder`` with a chat template, ``text`` otherwise (a server's model:
    ``model_folder`` None). ``InvalidParameterError`` naming ``prompt_format`` for an unknown
    form, or ``chat`` asked of a local model without a chat template."""
    if requested is None:
        return CHAT if model_folder is not None and has_chat_template(model_folder) else TEXT
    check_prompt_format(requested)
    if requested == CHAT and model_folder is not None and not has_chat_template(model_folder):
        raise InvalidParameterError("prompt_format", requested,
                                    f"the model at {model_folder} has no chat template "
                                    "(tokenizer_config.json chat_template); use --prompt-format "
                                    "text")
    return requested
