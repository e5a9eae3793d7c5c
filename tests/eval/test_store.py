"""The run store: any string round-trips (L4), one transaction per item, no duplicates, failed
samples never stored (L7), the run key guards the folder (L5); atomic results (L10)."""

from __future__ import annotations

import json
import sqlite3
import stat

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.atomic import write_json_atomic
from metagen.eval.store import ItemResult, RunStore, StoredSample
from metagen.types import Completion

NASTY = ["a\u2028b\u2029c\x85d\re\nf", "nul\x00inside", "lone \ud800 high", "lone \udfff low",
         "x" * (1 << 20), "emoji \U0001F600 and \u00e9"]


def _sample(j: int, text: str, **kw) -> StoredSample:
    return StoredSample(j, 100 + j, Completion(text, finish_reason="stop", generated_tokens=3,
                                               **kw), j % 2 == 0)


def test_any_string_round_trips_through_the_store_and_a_reopen(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as store:
        store.save_item("it\u2028em", [_sample(j, t) for j, t in enumerate(NASTY)])
    with RunStore(tmp_path / "s.sqlite") as store:
        got = store.samples("it\u2028em")
    assert [got[j].completion.text for j in range(len(NASTY))] == NASTY
    assert [got[j].correct for j in range(len(NASTY))] == [j % 2 == 0 for j in range(len(NASTY))]
    assert got[0].seed == 100 and got[0].completion.num_tokens == 3


def test_a_sample_index_is_stored_once_first_write_wins(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as store:
        store.save_item("q", [_sample(0, "first")])
        store.save_item("q", [_sample(0, "second"), _sample(1, "other")])
        assert {j: s.completion.text for j, s in store.samples("q").items()} == \
            {0: "first", 1: "other"}


@pytest.mark.parametrize("bad", [Completion("", finish_reason="stop"),
                                 Completion("", finish_reason="error", stop_reason="timeout")])
def test_failed_or_empty_samples_are_refused(tmp_path, bad):
    with RunStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(InvalidParameterError, match="samples"):
            store.save_item("q", [StoredSample(0, 1, bad, False)])
        assert store.samples("q") == {}


def test_an_item_is_saved_whole_or_not_at_all(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as store:
        bad_result = ItemResult("s", 1, "accuracy", 1.0, {"x": object()})  # not JSON
        with pytest.raises(TypeError):
            store.save_item("q", [_sample(0, "kept?")], [(1, "timeout")], None, [bad_result],
                            done=True)
        assert store.samples("q") == {} and store.failure_counts() == {}
        assert store.done_items() == set()


def test_failures_are_counted_by_reason_and_results_only_of_done_items(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as store:
        store.begin_session("k", 0.0)
        store.save_item("a", [_sample(0, "x")], [(1, "timeout"), (2, "timeout"), (3, "empty")])
        store.save_item("b", [], [], None, [ItemResult("s", 1, "accuracy", 0.5, {})])
        store.save_item("c", [], [], None, [ItemResult("s", 1, "accuracy", 1.0, {})], done=True)
        assert store.failure_counts() == {"empty": 1, "timeout": 2}
        assert store.results() == [("c", "s", 1, "accuracy", 1.0)]


def test_the_store_uses_wal(tmp_path):
    RunStore(tmp_path / "s.sqlite").close()
    db = sqlite3.connect(tmp_path / "s.sqlite")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_another_run_key_is_refused_naming_what_changed_unless_forced(tmp_path):
    with RunStore(tmp_path / "s.sqlite") as store:
        store.claim("k1", {"seed": 1, "model": "m"})
        store.claim("k1", {"seed": 1, "model": "m"})  # the same run resumes
        with pytest.raises(InvalidParameterError, match="run_key.*changed: seed"):
            store.claim("k2", {"seed": 2, "model": "m"})
        store.claim("k2", {"seed": 2, "model": "m"}, force=True)
        store.claim("k2", {"seed": 2, "model": "m"})


def test_atomic_json_replaces_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "results.json"
    write_json_atomic(target, {"a": 1, "nan": float("nan"), "s": "\u2028\ud800"})
    write_json_atomic(target, {"a": 2, "s": "\u2028\ud800"})
    assert json.loads(target.read_text()) == {"a": 2, "s": "\u2028\ud800"}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_atomic_json_gets_the_mode_a_plain_write_would(tmp_path):
    plain, target = tmp_path / "plain.json", tmp_path / "results.json"
    plain.write_text("{}")
    write_json_atomic(target, {"a": 1})  # new: 0o666 less the umask, as open() gives
    assert stat.S_IMODE(target.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode)
    target.chmod(0o640)
    write_json_atomic(target, {"a": 2})  # existing: keeps its mode
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


def test_atomic_json_leaves_the_old_file_when_the_object_is_not_json(tmp_path):
    target = tmp_path / "results.json"
    write_json_atomic(target, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    assert json.loads(target.read_text()) == {"a": 1}
