"""The output-constraint and token-healing flags of ``metagen generate``: the
:class:`~metagen.types.SamplingParams` fields ``regex``, ``json_schema``, ``grammar``, ``choice``
and ``token_healing``.

``--json-schema`` and ``--grammar`` take the text itself or a file holding it: a value that names
an existing file is read (UTF-8), any other is the text (a ``--json-schema`` that is neither a
file nor inline JSON -- it does not start with ``{`` -- is an ``InvalidParameterError`` naming
``json_schema``, so a mistyped path is not reported as malformed JSON). ``--choice`` repeats.
``--token-healing`` alone heals the prompt's last token (``token_healing`` 1, as ``True``);
``--token-healing K`` (or ``=K``) up to K of them. Every value then goes to ``SamplingParams``
unchanged, whose checks (one constraint at most, its syntax, healing not with a constraint) name
the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from metagen.cli.flags import int_flag, option_group
from metagen.errors import InvalidParameterError

CONSTRAINT_FLAGS = [
    click.option("--regex", default=None, metavar="REGEX",
                 help="Constrain the output to this regular expression (the whole output)."),
    click.option("--json-schema", default=None, metavar="FILE|JSON",
                 help="Constrain the output to JSON documents of this schema (a file, or the "
                 "schema inline)."),
    click.option("--grammar", default=None, metavar="FILE|LARK",
                 help="Constrain the output to this grammar (Lark, llguidance's dialect; a "
                 "file, or the grammar inline)."),
    click.option("--choice", multiple=True, metavar="TEXT",
                 help="Constrain the output to one of these strings (repeatable)."),
    click.option("--token-healing", is_flag=False, flag_value="1", default=None,
                 metavar="[K]", help="Back up over the prompt's last token (up to K tokens, "
                 "at most 8) and make the first generated tokens re-produce its text; not with "
                 "an output constraint. Put it after PROMPT or write --token-healing=K."),
]
CONSTRAINT_NAMES = ("regex", "json_schema", "grammar", "choice", "token_healing")


# Decorates a click command with CONSTRAINT_FLAGS (its kwargs: CONSTRAINT_NAMES).
constraint_flags = option_group(CONSTRAINT_FLAGS)


def constraint_values(flags: dict[str, Any]) -> dict[str, Any]:
    """Take the flags out of a command's ``**flags``: the ``SamplingParams`` keyword arguments
    they set (see the module docstring)."""
    values = {name: flags.pop(name) for name in CONSTRAINT_NAMES}
    schema = text_or_file("json_schema", values["json_schema"])
    if schema is not None and not schema.lstrip().startswith("{"):
        raise InvalidParameterError("json_schema", values["json_schema"], "must be a JSON "
                                    "schema file or the schema inline (a JSON object)")
    heal = int_flag("token_healing", values["token_healing"])
    return {"regex": values["regex"], "json_schema": schema,
            "grammar": text_or_file("grammar", values["grammar"]),
            "choice": tuple(values["choice"]) or None,
            "token_healing": False if heal is None else heal}


def text_or_file(name: str, value: str | None) -> str | None:
    """The contents of the file ``value`` names when it is one, else ``value`` itself; a file
    that cannot be read is an ``InvalidParameterError`` naming ``name``."""
    if value is None or not _is_file(value):
        return value
    try:
        return Path(value).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(name, value, f"cannot be read: {exc}") from None


def _is_file(text: str) -> bool:
    """Whether ``text`` names an existing file (an inline grammar too long or too odd to be a
    path is not one)."""
    try:
        return "\n" not in text and "\0" not in text and Path(text).is_file()
    except OSError:
        return False
