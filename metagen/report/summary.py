"""A run's provenance as (label, value) pairs for the page (pure): what was run, on what, how
it ended. Missing fields are left out, never guessed."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any


def provenance_summary(results: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Labelled strings from a ``results.json`` object, in a fixed order."""
    config = _dict(results.get("config"))
    prov = _dict(results.get("provenance"))
    sampling = _dict(config.get("sampling"))
    times = _dict(results.get("times"))
    acct = _dict(results.get("accounting"))
    pairs: list[tuple[str, Any]] = [
        ("status", results.get("status")),
        ("task", config.get("task")),
        ("strategy", config.get("strategy") or config.get("strategies")),
        ("N", config.get("ns")),
        ("model", _model(_dict(prov.get("model")) or _dict(config.get("model")))),
        ("backends", prov.get("backends")),
        ("reward", config.get("reward")),
        ("prm", config.get("prm")),
        ("strategy args", config.get("strategy_args") or None),
        ("sampling", ", ".join(f"{k}={sampling[k]}" for k in
                               ("temperature", "top_p", "top_k", "max_tokens") if k in sampling)
         or None),
        ("seed", config.get("seed")),
        ("items", ", ".join(f"{k} {acct[k]}" for k in ("n_items_total", "done", "failed",
                                                       "skipped") if k in acct) or None),
        ("generated tokens", results.get("generated_tokens")),
        ("versions", ", ".join(f"{k} {v}" for k, v in _dict(prov.get("versions")).items())
         or None),
        ("hardware", ", ".join(f"{k} {v}" for k, v in _dict(prov.get("hardware")).items()
                               if not isinstance(v, Mapping)) or None),
        ("started", _time(times.get("started_at"))),
        ("ended", _time(times.get("ended_at"))),
        ("sessions", times.get("sessions")),
        ("run key", str(results["run_key"])[:16] if results.get("run_key") else None),
    ]
    return [(label, _text(value)) for label, value in pairs if value not in (None, "", [])]


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _model(model: Mapping[str, Any]) -> str | None:
    if not model:
        return None
    return ", ".join(f"{k}={v}" for k, v in model.items() if v is not None)


def _time(value: Any) -> str | None:
    if not isinstance(value, (int, float)):
        return None
    stamp = datetime.datetime.fromtimestamp(value, tz=datetime.timezone.utc)
    return stamp.strftime("%Y-%m-%d %H:%M:%S UTC")


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
