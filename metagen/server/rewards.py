"""The scorers the server loads by name at start (``--orm NAME=SPEC``, ``--prm NAME=SPEC``): the
specs are parsed before anything loads, and each loads through the one resolver
(:func:`metagen.scorers.resolve.resolve_scorer`), as ``metagen eval`` loads ``--reward`` and
``--prm``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.scorers.scorer_spec import Role, ScorerSpec, accepted_forms, parse_scorer_spec


def parse_named_specs(items: Sequence[str], role: Role, flag: str) -> dict[str, ScorerSpec]:
    """``["NAME=SPEC", ...]`` -> ``{NAME: parsed SPEC}`` (a spec may itself hold ``=``: the
    name ends at the first one); ``InvalidParameterError`` naming ``flag`` for an item without
    ``=``, an empty name, a repeated name or a spec that does not parse."""
    out: dict[str, ScorerSpec] = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not name or not spec:
            raise InvalidParameterError(flag, item, f"must be --{flag} NAME=SPEC, SPEC one of: "
                                        f"{accepted_forms(role)}")
        if name in out:
            raise InvalidParameterError(flag, item, f"the name {name!r} is given twice")
        out[name] = parse_scorer_spec(spec, role, flag)
    return out


def load_named(specs: dict[str, ScorerSpec], role: Role, flag: str,
               default_folder: str | Path | None = None) -> dict[str, Any]:
    """Each named spec's scorer, loaded by the resolver; a bare ``likelihood`` reads
    ``default_folder`` (the served model). ``ModelLoadError`` for a folder that cannot be
    loaded."""
    from metagen.scorers.resolve import resolve_scorer

    return {name: resolve_scorer(spec, role, flag=flag, default_folder=default_folder)
            for name, spec in specs.items()}
