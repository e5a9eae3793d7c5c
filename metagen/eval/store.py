"""The run's SQLite store: every sample, score, per-item strategy result and failure, under one
run key.

Durability: WAL journal, ``synchronous=FULL``, and ONE transaction per item
(:meth:`RunStore.save_item`), so a process killed at any point leaves each item either fully
recorded or absent (L1); a rerun skips items marked done and never duplicates a sample (primary
key (item, sample index), first write wins). Failed or empty samples are never stored as
samples; they are logged in ``failures`` with their reason and retried on resume (L7). Text is
stored as UTF-8 bytes with lone surrogates passed through, so any Python string round-trips
(``\\x00``, ``\\u2028``, lone surrogates, megabytes; L4). Not thread-safe: one writer per store.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.types import Completion

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (session INTEGER PRIMARY KEY AUTOINCREMENT, run_key TEXT NOT NULL,
    started_at REAL NOT NULL, ended_at REAL, status TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (item_id TEXT PRIMARY KEY, difficulty TEXT);
CREATE TABLE IF NOT EXISTS samples (item_id TEXT NOT NULL, sample_index INTEGER NOT NULL,
    seed INTEGER NOT NULL, text BLOB NOT NULL, num_tokens INTEGER NOT NULL,
    cumulative_logprob REAL, finish_reason TEXT NOT NULL, stop_reason TEXT,
    correct INTEGER NOT NULL, PRIMARY KEY (item_id, sample_index));
CREATE TABLE IF NOT EXISTS scores (item_id TEXT NOT NULL, sample_index INTEGER NOT NULL,
    scorer TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (item_id, sample_index, scorer));
CREATE TABLE IF NOT EXISTS results (item_id TEXT NOT NULL, strategy TEXT NOT NULL,
    n INTEGER NOT NULL, metric TEXT NOT NULL, value REAL NOT NULL, trace TEXT NOT NULL,
    PRIMARY KEY (item_id, strategy, n, metric));
CREATE TABLE IF NOT EXISTS failures (id INTEGER PRIMARY KEY AUTOINCREMENT, session INTEGER,
    item_id TEXT NOT NULL, sample_index INTEGER, reason TEXT NOT NULL);
"""


@dataclass(slots=True, frozen=True)
class StoredSample:
    """One successful sample as stored: its index, the seed of the generate call that drew it
    (sample ``index`` of that call), the completion and its grade."""

    index: int
    seed: int
    completion: Completion
    correct: bool


@dataclass(slots=True, frozen=True)
class ItemResult:
    """One (strategy, N, metric) value of one item, with a JSON-able trace."""

    strategy: str
    n: int
    metric: str
    value: float
    trace: Mapping[str, Any]


def encode_text(text: str) -> bytes:
    """UTF-8 with lone surrogates kept (the inverse of :func:`decode_text`)."""
    return text.encode("utf-8", "surrogatepass")


def decode_text(data: bytes) -> str:
    return bytes(data).decode("utf-8", "surrogatepass")


class RunStore:
    """A run's store at ``path`` (created if absent). Use as a context manager or ``close()``."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.session: int | None = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    # -- the run key ---------------------------------------------------------------------------
    def claim(self, key: str, fields: Mapping[str, Any], force: bool = False) -> None:
        """Bind the store to run ``key`` (its ``fields`` kept for the message). A store holding
        another key raises ``InvalidParameterError`` naming ``run_key`` and the fields that
        changed, unless ``force`` (then the new key replaces the old one, results are kept)."""
        from metagen.eval.runkey import key_differences

        row = self.db.execute("SELECT value FROM meta WHERE key='run_key'").fetchone()
        if row is not None and row[0] != key and not force:
            old = json.loads(self._meta("key_fields") or "{}")
            changed = ", ".join(key_differences(old, fields)) or "unknown"
            raise InvalidParameterError(
                "run_key", key[:12], f"the folder holds run {row[0][:12]}, made with other "
                f"settings (changed: {changed}); use a new --out, or --force-resume to mix them")
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('run_key', ?)", (key,))
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('key_fields', ?)",
                            (json.dumps(fields, sort_keys=True),))

    def note_backend(self, name: str) -> None:
        """Record that a session generated with backend ``name`` (kept once, in order)."""
        names = self.backends()
        if name not in names:
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('backends', ?)",
                            (json.dumps([*names, name]),))

    def backends(self) -> list[str]:
        """The backends sessions of this run generated with, first first."""
        return list(json.loads(self._meta("backends") or "[]"))

    def _meta(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    # -- sessions ------------------------------------------------------------------------------
    def begin_session(self, key: str, started_at: float) -> int:
        cur = self.db.execute("INSERT INTO runs (run_key, started_at, status) VALUES (?, ?, ?)",
                              (key, started_at, "running"))
        self.session = int(cur.lastrowid or 0)
        return self.session

    def end_session(self, ended_at: float, status: str) -> None:
        self.db.execute("UPDATE runs SET ended_at=?, status=? WHERE session=?",
                        (ended_at, status, self.session))

    def first_started_at(self) -> float | None:
        row = self.db.execute("SELECT MIN(started_at) FROM runs").fetchone()
        return None if row[0] is None else float(row[0])

    def sessions(self) -> int:
        return int(self.db.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    # -- items ---------------------------------------------------------------------------------
    def done_items(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT item_id FROM items")}

    def samples(self, item_id: str) -> dict[int, StoredSample]:
        rows = self.db.execute(
            "SELECT sample_index, seed, text, num_tokens, cumulative_logprob, finish_reason, "
            "stop_reason, correct FROM samples WHERE item_id=? ORDER BY sample_index", (item_id,))
        return {r[0]: StoredSample(r[0], r[1], Completion(
            decode_text(r[2]), cumulative_logprob=r[4], finish_reason=r[5], stop_reason=r[6],
            generated_tokens=r[3]), bool(r[7])) for r in rows}

    def scores(self, item_id: str, scorer: str) -> dict[int, float]:
        return {r[0]: r[1] for r in self.db.execute(
            "SELECT sample_index, value FROM scores WHERE item_id=? AND scorer=?",
            (item_id, scorer))}

    def save_item(self, item_id: str, samples: Sequence[StoredSample],
                  failures: Sequence[tuple[int | None, str]] = (),
                  scores: Mapping[str, Mapping[int, float]] | None = None,
                  results: Sequence[ItemResult] = (), done: bool = False,
                  difficulty: str | None = None) -> None:
        """In ONE transaction: the new successful ``samples`` (an index already stored keeps its
        first value), the ``failures`` (sample index or None, reason), ``scores`` (scorer ->
        index -> value), the item's ``results``, and, when ``done``, the item's completion mark.
        Raises ``InvalidParameterError`` for a sample that failed or is empty (never stored)."""
        for s in samples:
            if s.completion.finish_reason == "error" or s.completion.text == "":
                raise InvalidParameterError("samples", s.index, "failed or empty samples are "
                                            "recorded as failures, never stored")
        with self.db:
            self.db.execute("BEGIN")
            self.db.executemany(
                "INSERT OR IGNORE INTO samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(item_id, s.index, s.seed, encode_text(s.completion.text),
                  s.completion.num_tokens, s.completion.cumulative_logprob,
                  s.completion.finish_reason, _stop(s.completion.stop_reason), int(s.correct))
                 for s in samples])
            self.db.executemany("INSERT INTO failures (session, item_id, sample_index, reason) "
                                "VALUES (?, ?, ?, ?)",
                                [(self.session, item_id, j, why) for j, why in failures])
            for scorer, values in (scores or {}).items():
                self.db.executemany("INSERT OR IGNORE INTO scores VALUES (?, ?, ?, ?)",
                                    [(item_id, j, scorer, v) for j, v in values.items()])
            self.db.executemany(
                "INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?, ?)",
                [(item_id, r.strategy, r.n, r.metric, r.value, json.dumps(r.trace))
                 for r in results])
            if done:
                self.db.execute("INSERT OR IGNORE INTO items VALUES (?, ?)",
                                (item_id, difficulty))

    # -- summaries -----------------------------------------------------------------------------
    def results(self) -> list[tuple[str, str, int, str, float]]:
        """(item, strategy, n, metric, value) of done items, in a fixed order."""
        return [tuple(r) for r in self.db.execute(  # type: ignore[misc]
            "SELECT r.item_id, strategy, n, metric, value FROM results r JOIN items i "
            "ON r.item_id = i.item_id ORDER BY strategy, n, metric, r.item_id")]

    def failure_counts(self) -> dict[str, int]:
        """Failed samples by reason, over every session of the run."""
        return {r[0]: r[1] for r in self.db.execute(
            "SELECT reason, COUNT(*) FROM failures GROUP BY reason ORDER BY reason")}

    def token_count(self) -> int:
        """Generated tokens of the stored samples of done items."""
        row = self.db.execute("SELECT COALESCE(SUM(num_tokens), 0) FROM samples s JOIN items i "
                              "ON s.item_id = i.item_id").fetchone()
        return int(row[0])


    # -- per-item views (difficulty tables, compute-optimal choice) -----------------------------
    def difficulties(self) -> dict[str, str | None]:
        """Done item -> its task difficulty label (None when the task gives none)."""
        return {r[0]: r[1] for r in self.db.execute("SELECT item_id, difficulty FROM items")}

    def sample_summary(self) -> dict[str, tuple[int, int, int]]:
        """Done item -> (stored samples, of them correct, their generated tokens)."""
        return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in self.db.execute(
            "SELECT s.item_id, COUNT(*), SUM(correct), SUM(num_tokens) FROM samples s "
            "JOIN items i ON s.item_id = i.item_id GROUP BY s.item_id")}

    def mean_scores(self, scorer: str) -> dict[str, float]:
        """Done item -> mean score by ``scorer`` over its scored samples."""
        return {r[0]: float(r[1]) for r in self.db.execute(
            "SELECT s.item_id, AVG(value) FROM scores s JOIN items i ON s.item_id = i.item_id "
            "WHERE scorer=? GROUP BY s.item_id", (scorer,))}

    def traced_tokens(self) -> dict[tuple[str, str, int], int]:
        """(item, strategy, n) -> generated tokens, for the done items' results whose trace
        carries a usage (the strategies run at each N)."""
        return {(r[0], r[1], int(r[2])): int(r[3]) for r in self.db.execute(
            "SELECT r.item_id, strategy, n, json_extract(trace, '$.usage.generated_tokens') AS t "
            "FROM results r JOIN items i ON r.item_id = i.item_id WHERE t IS NOT NULL")}


def _stop(reason: str | int | None) -> str | None:
    return None if reason is None else str(reason)
