"""Structured output in a request body -> the constraint fields of :class:`SamplingParams`.

The spellings clients send, at most one per request (two are a 400 naming both):

- vLLM's ``structured_outputs``: ``{"json": schema, "regex": str, "choice": [str, ...],
  "grammar": str}``, one key (vLLM 0.12 and later);
- vLLM's earlier ``guided_json``, ``guided_regex``, ``guided_choice``, ``guided_grammar``;
- OpenAI's ``response_format``: ``{"type": "json_schema", "json_schema": {"name": ...,
  "schema": {...}, "strict": ...}}``, ``{"type": "json_object"}`` (any JSON object) or
  ``{"type": "text"}`` (no constraint).

The constraint is checked when the request is made (syntax here, the language against the
tokenizer in the backend's ``validate``), so a bad one is a 400 naming the field as the client
spelt it (V19), never an error mid-generation. Grammars are Lark in llguidance's dialect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metagen.server.errors import bad_request

_GUIDED = {"guided_json": "json_schema", "guided_regex": "regex",
           "guided_choice": "choice", "guided_grammar": "grammar"}
_STRUCTURED_KEYS = {"json": "json_schema", "regex": "regex", "choice": "choice",
                    "grammar": "grammar"}
STRUCTURED_FIELDS = frozenset({"structured_outputs", "response_format", *_GUIDED})


def constraint_fields(body: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``(kwargs, wire_names)``: the :class:`SamplingParams` constraint fields the body asks
    for, and for each the name the client used (for error messages). Raises a 400
    :class:`~metagen.server.errors.ApiError` for two spellings at once or a malformed
    ``structured_outputs`` / ``response_format`` object."""
    given = [k for k in sorted(STRUCTURED_FIELDS) if body.get(k) is not None]
    if not given:
        return {}, {}
    if len(given) > 1:
        raise bad_request(given[1], f"{' and '.join(given)} both constrain the output: give one")
    name = given[0]
    value = body[name]
    if name in _GUIDED:
        found: tuple[str, Any, str] | None = (_GUIDED[name], value, name)
    elif name == "structured_outputs":
        found = _structured_outputs(value)
    else:
        found = _response_format(value)
    if found is None:
        return {}, {}
    field, value, wire = found
    if field == "choice" and isinstance(value, list):
        value = tuple(value)  # SamplingParams checks a tuple of choices
    return {field: value}, {field: wire}


def _structured_outputs(value: Any) -> tuple[str, Any, str]:
    """(SamplingParams field, value, wire name) of a ``structured_outputs`` object."""
    if not isinstance(value, dict):
        raise bad_request("structured_outputs", "structured_outputs must be an object with one "
                          f"of {', '.join(_STRUCTURED_KEYS)}")
    keys = [k for k, v in value.items() if v is not None]
    unknown = [k for k in keys if k not in _STRUCTURED_KEYS]
    if unknown:
        raise bad_request(f"structured_outputs.{str(unknown[0])[:40]}", "structured_outputs "
                          f"takes one of {', '.join(_STRUCTURED_KEYS)}; got {unknown[0]!r:.60}")
    if len(keys) != 1:
        raise bad_request("structured_outputs", "structured_outputs takes exactly one of "
                          f"{', '.join(_STRUCTURED_KEYS)}")
    key = keys[0]
    return _STRUCTURED_KEYS[key], value[key], f"structured_outputs.{key}"


def _response_format(value: Any) -> tuple[str, Any, str] | None:
    """(SamplingParams field, value, wire name) of a ``response_format``; None for text."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return "json_schema", {"type": "object"}, "response_format"
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is None:
            raise bad_request("response_format.json_schema.schema", "response_format of type "
                              "json_schema needs json_schema.schema (a JSON schema object)")
        return "json_schema", schema, "response_format.json_schema.schema"
    raise bad_request("response_format", "response_format.type must be 'text', 'json_object' "
                      "or 'json_schema'")
