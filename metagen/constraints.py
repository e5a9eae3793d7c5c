r"""Structured-output constraints of a request: which one is set, and its llguidance grammar.

A :class:`~metagen.types.SamplingParams` carries at most one of ``regex``, ``json_schema``,
``grammar`` (Lark, llguidance's dialect) and ``choice`` (a list of strings). This module turns
the one that is set into llguidance's grammar text and checks its syntax without a tokenizer,
so a malformed constraint is an :class:`InvalidParameterError` naming the field when the request
is made (V19), never mid-generation; so is a grammar or JSON schema whose language is empty
because it can never finish (``start: "a" start``, a schema that requires itself;
:mod:`metagen.empty_language`). Checks that need the tokenizer (a language without even a first
byte, such as the regex ``[^\s\S]``) are made by the backend that compiles the grammar
(:mod:`metagen.decoding.grammar`). llguidance is optional: without it the syntax check is left
to the backend, and only backends that compile grammars locally need it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from metagen.deep_stack import on_deep_stack
from metagen.empty_language import json_schema_unproductive, lark_unproductive
from metagen.errors import CapabilityError, InvalidParameterError

CONSTRAINT_FIELDS = ("regex", "json_schema", "grammar", "choice")
INSTALL_HINT = "pip install 'metagen[structured]'  (llguidance)"
MAX_CONSTRAINT_CHARS = 1_000_000  # bounded request size (V25)
MAX_CHOICES = 10_000


def llguidance_available() -> bool:
    """True when the ``llguidance`` package can be imported."""
    try:
        import llguidance  # noqa: F401
    except ImportError:
        return False
    return True


def require_llguidance() -> Any:
    """The ``llguidance`` module, or :class:`CapabilityError` with the install command."""
    try:
        import llguidance
    except ImportError as exc:
        raise CapabilityError(f"constrained decoding needs llguidance: {INSTALL_HINT}") from exc
    return llguidance


def normalize_constraint(name: str, value: Any) -> Any:
    """The checked value of constraint field ``name`` (``None`` stays ``None``): a non-empty
    string (``regex``, ``grammar``), a JSON-object string or mapping (``json_schema``, kept as
    its canonical JSON string), or a tuple of distinct non-empty strings (``choice``)."""
    if value is None:
        return None
    if name == "choice":
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise InvalidParameterError(name, value, "must be a list of strings")
        if not value or len(value) > MAX_CHOICES:
            raise InvalidParameterError(name, value, f"must hold 1 to {MAX_CHOICES} strings")
        if not all(isinstance(c, str) and c for c in value):
            raise InvalidParameterError(name, value, "every choice must be a non-empty string")
        _check_size(name, value, sum(len(c) for c in value))
        return tuple(value)
    if name == "json_schema":
        if isinstance(value, Mapping):
            try:
                value = json.dumps(value, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise InvalidParameterError(name, value, f"is not JSON: {exc}") from None
        if not isinstance(value, str):
            raise InvalidParameterError(name, value, "must be a JSON schema (dict or JSON string)")
        _check_size(name, value, len(value))
        try:
            parsed = json.loads(value)
        except ValueError as exc:
            raise InvalidParameterError(name, value, f"is not JSON: {exc}") from None
        if not isinstance(parsed, (dict, bool)):
            raise InvalidParameterError(name, value, "must be a JSON object (a schema)")
        return value
    if not isinstance(value, str) or not value:
        raise InvalidParameterError(name, value, "must be a non-empty string")
    _check_size(name, value, len(value))
    return value


def _check_size(name: str, value: Any, chars: int) -> None:
    if chars > MAX_CONSTRAINT_CHARS:
        raise InvalidParameterError(name, f"<{chars} characters>",
                                    f"at most {MAX_CONSTRAINT_CHARS} characters")


def active_constraint(values: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(field, value)`` of the one constraint set in ``values`` (field -> normalized value),
    ``None`` when none is; two or more is an :class:`InvalidParameterError` naming them all."""
    chosen = [(k, v) for k, v in values.items() if k in CONSTRAINT_FIELDS and v is not None]
    if len(chosen) > 1:
        names = " and ".join(k for k, _ in chosen)
        raise InvalidParameterError(names, [v for _, v in chosen],
                                    "at most one of regex, json_schema, grammar, choice may be set")
    return chosen[0] if chosen else None


def check_constraint_fields(params: Any) -> None:
    """Normalize the constraint fields of the frozen dataclass ``params`` in place and check
    them: the value shapes, at most one set, its syntax (:func:`check_syntax`)."""
    values = {}
    for name in CONSTRAINT_FIELDS:
        values[name] = normalize_constraint(name, getattr(params, name))
        object.__setattr__(params, name, values[name])
    chosen = active_constraint(values)
    if chosen is not None:
        check_syntax(*chosen)


def constraint_of(params: Any) -> tuple[str, Any] | None:
    """``(field, value)`` of the constraint set on ``params`` (checked fields), else ``None``."""
    for name in CONSTRAINT_FIELDS:
        value = getattr(params, name, None)
        if value is not None:
            return name, value
    return None


def grammar_text(name: str, value: Any) -> str:
    """llguidance's grammar for constraint ``name`` with normalized ``value`` (llguidance
    installed; syntax not checked here)."""
    llg = require_llguidance()
    if name == "choice":
        return str(llg.grammar_from("choice", json.dumps(list(value))))
    try:
        if name == "json_schema":  # compact JSON unless the schema's "x-guidance" says otherwise
            return str(llg.LLMatcher.grammar_from_json_schema(
                value, defaults={"whitespace_flexible": False}))
        return str(llg.grammar_from("lark" if name == "grammar" else name, value))
    except ValueError as exc:
        raise InvalidParameterError(name, value, str(exc)) from None


@lru_cache(maxsize=256)
def _syntax_error(grammar: str) -> str:
    llg = require_llguidance()  # a deep grammar would overflow a default stack (deep_stack)
    return str(on_deep_stack(llg.LLMatcher.validate_grammar, grammar))


def check_syntax(name: str, value: Any) -> None:
    """Raise :class:`InvalidParameterError` naming ``name`` when llguidance rejects the
    constraint's syntax (an unclosed regex group, an unknown Lark rule; skipped without
    llguidance: the backend that compiles the grammar checks it then), or when its language is
    empty because no derivation finishes (:func:`empty_language`). Cached per grammar."""
    if llguidance_available():
        error = _syntax_error(grammar_text(name, value))
        if error:
            raise InvalidParameterError(name, value,
                                        f"is not a valid {name}: {error.strip()[:300]}")
    reason = empty_language(name, value)
    if reason:
        raise InvalidParameterError(name, value, f"has an empty language: {reason}")


@lru_cache(maxsize=256)
def empty_language(name: str, value: Any) -> str:
    """Why constraint ``name`` (normalized ``value``) admits no finite string, or ``""`` when
    it admits one or the check cannot tell (:mod:`metagen.empty_language`; regexes and choices
    are left to the compiling backend)."""
    if name == "grammar":
        rules = lark_unproductive(value)
        if rules:
            return (f"no derivation of rule {rules[0]!r} ever finishes (every alternative of "
                    f"{', '.join(repr(r) for r in rules)} needs one of them again)")
    elif name == "json_schema" and json_schema_unproductive(value):
        return ("no finite document satisfies it (a required part needs the schema itself, or "
                "an unsatisfiable subschema)")
    return ""
