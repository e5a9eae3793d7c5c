"""An output constraint (``SamplingParams.regex`` / ``json_schema`` / ``grammar`` / ``choice``)
as the structured-output fields of an OpenAI-compatible server, per dialect.

- ``openai``: a JSON schema as ``response_format = {"type": "json_schema", ...}`` (strict);
  nothing else.
- ``vllm``: ``structured_outputs = {"json" | "regex" | "choice" | "grammar": ...}`` (the API since
  v0.12, which removed ``guided_*``); ``grammar`` is Lark, which vLLM's guidance backend reads.
- ``sglang``: ``json_schema`` (a string) and ``regex``; a choice list becomes the regex of its
  escaped alternatives; no Lark.
- ``llamacpp``: ``json_schema``; no regex, and its ``grammar`` is GBNF, not Lark.
- ``llamacpp-python``: none.

A constraint the dialect cannot express is named by :func:`unsupported` so that
:func:`~metagen.generators.openai_wire.check_supported` refuses the request before it is sent.
"""

from __future__ import annotations

import json
import re
from typing import Any

from metagen.types import SamplingParams

_SUPPORTED: dict[str, frozenset[str]] = {
    "openai": frozenset({"json_schema"}),
    "vllm": frozenset({"json_schema", "regex", "choice", "grammar"}),
    "sglang": frozenset({"json_schema", "regex", "choice"}),
    "llamacpp": frozenset({"json_schema"}),
    "llamacpp-python": frozenset(),
}


def unsupported(params: SamplingParams, dialect: str) -> str | None:
    """The constraint field set in ``params`` that ``dialect`` cannot honour, else ``None``."""
    constraint = params.constraint
    if constraint is None or constraint[0] in _SUPPORTED.get(dialect, frozenset()):
        return None
    return constraint[0]


def structured_fields(params: SamplingParams, dialect: str) -> dict[str, Any]:
    """Body fields carrying ``params``' constraint for ``dialect`` (empty when unconstrained;
    call after :func:`unsupported` returned ``None``)."""
    constraint = params.constraint
    if constraint is None:
        return {}
    name, value = constraint
    if dialect == "openai":
        return {"response_format": {"type": "json_schema", "json_schema": {
            "name": "output", "schema": json.loads(value), "strict": True}}}
    if dialect == "vllm":
        key = {"json_schema": "json", "regex": "regex", "choice": "choice",
               "grammar": "grammar"}[name]
        wire = json.loads(value) if name == "json_schema" else \
            list(value) if name == "choice" else value
        return {"structured_outputs": {key: wire}}
    if dialect == "sglang":
        if name == "choice":
            return {"regex": "(" + "|".join(re.escape(c) for c in value) + ")"}
        return {name: value}  # json_schema as its JSON string, regex as is
    return {"json_schema": json.loads(value)}  # llamacpp
