"""Read a run's SQLite store without writing to it (the report never changes a run folder).

The store is opened read-only, and a finished run's store (no write-ahead log left) as
immutable, so no file appears in the folder; only done items (those in ``items``) are read, in the order they
were finished. Texts are decoded as the store wrote them (lone surrogates kept)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metagen.eval.store import decode_text


@dataclass(slots=True)
class StoredRun:
    """Everything the per-item view needs from one store: ``items`` (id, difficulty) in finish
    order; per item its ``samples`` (dicts in index order), ``scores`` (sample index -> scorer ->
    value) and ``results`` ((strategy, n, metric, value, trace) in a fixed order)."""

    items: list[tuple[str, str | None]] = field(default_factory=list)
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    scores: dict[str, dict[int, dict[str, float]]] = field(default_factory=dict)
    results: dict[str, list[tuple[str, int, str, float, Any]]] = field(default_factory=dict)


def read_store(path: str | Path, text_items: int | None = None) -> StoredRun:
    """The done items of the store at ``path`` (which must exist). With ``text_items`` only
    the first that many items keep their samples' texts (the others get ``""``, so a large run
    is not held in memory for items the page lists without detail). Raises ``sqlite3.Error``
    on an unreadable file."""
    path = Path(path).resolve()
    # a closed store has no write-ahead log: open it immutable (SQLite then creates no -shm /
    # -wal files); a store with one (a live or killed run) must be read through it
    live = path.with_name(path.name + "-wal").exists()
    db = sqlite3.connect(f"{path.as_uri()}?{'mode=ro' if live else 'immutable=1'}", uri=True)
    try:
        return _read(db, text_items)
    finally:
        db.close()


def _read(db: sqlite3.Connection, text_items: int | None) -> StoredRun:
    run = StoredRun(items=[(r[0], r[1]) for r in db.execute(
        "SELECT item_id, difficulty FROM items ORDER BY rowid")])
    done = {item_id for item_id, _ in run.items}
    with_text = {item_id for item_id, _ in run.items[:text_items]}
    for item_id, index, text, tokens, finish, correct in db.execute(
            "SELECT item_id, sample_index, text, num_tokens, finish_reason, correct FROM samples "
            "ORDER BY item_id, sample_index"):
        if item_id in done:
            run.samples.setdefault(item_id, []).append({
                "index": index, "text": decode_text(text) if item_id in with_text else "",
                "tokens": tokens,
                "finish_reason": finish, "correct": bool(correct)})
    for item_id, index, scorer, value in db.execute(
            "SELECT item_id, sample_index, scorer, value FROM scores ORDER BY scorer"):
        if item_id in done:
            run.scores.setdefault(item_id, {}).setdefault(index, {})[scorer] = value
    for item_id, strategy, n, metric, value, trace in db.execute(
            "SELECT item_id, strategy, n, metric, value, trace FROM results "
            "ORDER BY strategy, metric, n"):
        if item_id in done:
            run.results.setdefault(item_id, []).append(
                (strategy, n, metric, value, json.loads(trace)))
    return run
