"""Results by difficulty and the winner per (bin, budget), on hand-made rows with golden values:
the winner is the highest accuracy, ties go to fewer tokens then to the name, pass@k never
competes, a strategy missing an item of the bin does not compete."""

from __future__ import annotations

import math

from metagen.eval.breakdown import ALL, by_difficulty, difficulty_tables, winner, winners_table
from metagen.eval.breakdown import accuracy_table
from metagen.eval.runrows import RunRows

ACC = "accuracy"
LABELS = {"a": "d1", "b": "d1", "c": "d2", "d": "d2"}
ROWS = (
    # n=4: X wins d1, Y wins d2 and overall
    ("a", "X", 4, ACC, 1.0), ("b", "X", 4, ACC, 1.0), ("c", "X", 4, ACC, 0.0),
    ("d", "X", 4, ACC, 0.0),
    ("a", "Y", 4, ACC, 0.0), ("b", "Y", 4, ACC, 1.0), ("c", "Y", 4, ACC, 1.0),
    ("d", "Y", 4, ACC, 1.0),
    # n=1: equal accuracy everywhere; X spends fewer tokens
    ("a", "X", 1, ACC, 1.0), ("b", "X", 1, ACC, 0.0), ("c", "X", 1, ACC, 0.0),
    ("d", "X", 1, ACC, 1.0),
    ("a", "Y", 1, ACC, 1.0), ("b", "Y", 1, ACC, 0.0), ("c", "Y", 1, ACC, 0.0),
    ("d", "Y", 1, ACC, 1.0),
    # the samples' pass@k is higher than both but is never a candidate
    ("a", "samples", 4, "pass@k", 1.0), ("b", "samples", 4, "pass@k", 1.0),
    ("c", "samples", 4, "pass@k", 1.0), ("d", "samples", 4, "pass@k", 1.0),
)
TOKENS = {**{(i, "X", n): 10.0 * n for i in LABELS for n in (1, 4)},
          **{(i, "Y", n): 20.0 * n for i in LABELS for n in (1, 4)}}
RUN = RunRows(ROWS, LABELS, {}, {}, TOKENS)


def _table() -> dict[tuple[str, int], dict]:
    bins = dict(LABELS)
    return {(r["bin"], r["n"]): r for r in winners_table(RUN, bins, ["d1", "d2"])}


def test_winners_per_bin_and_budget_are_the_golden_ones():
    table = _table()
    assert {k: r["strategy"] for k, r in table.items()} == {
        ("d1", 1): "X", ("d1", 4): "X", ("d2", 1): "X", ("d2", 4): "Y",
        (ALL, 1): "X", (ALL, 4): "Y"}
    assert table[("d1", 4)]["accuracy"] == 1.0 and table[("d1", 4)]["stderr"] == 0.0
    assert table[("d1", 4)]["candidates"] == {"X": 1.0, "Y": 0.5}
    assert table[(ALL, 4)]["accuracy"] == 0.75 and table[(ALL, 4)]["items"] == 4
    assert math.isclose(table[(ALL, 4)]["stderr"], 0.25)  # sd 0.5 of (0, 1, 1, 1) / sqrt(4)
    assert table[(ALL, 4)]["tokens"] == 80.0 and table[("d1", 1)]["tokens"] == 10.0


def test_equal_accuracy_goes_to_fewer_tokens_then_to_the_name():
    acc = accuracy_table(ROWS)
    assert winner(acc, TOKENS, 1, ["a", "b"])["strategy"] == "X"
    cheaper_y = {**TOKENS, **{(i, "Y", 1): 1.0 for i in LABELS}}
    assert winner(acc, cheaper_y, 1, ["a", "b"])["strategy"] == "Y"
    assert winner(acc, {}, 1, ["a", "b"])["strategy"] == "X"  # tokens unknown: by name
    known_y_only = {(i, "Y", 1): 99.0 for i in LABELS}
    assert winner(acc, known_y_only, 1, ["a", "b"])["strategy"] == "Y"  # unknown counts last


def test_a_strategy_without_every_item_of_the_bin_does_not_compete():
    acc = accuracy_table([*ROWS, ("a", "Z", 4, ACC, 1.0), ("b", "Z", 4, ACC, 1.0)])
    assert winner(acc, {}, 4, ["a", "b"])["candidates"] == {"X": 1.0, "Y": 0.5, "Z": 1.0}
    assert "Z" not in winner(acc, {}, 4, ["a", "c"])["candidates"]
    assert winner(acc, {}, 2, ["a"]) is None and winner(acc, {}, 4, []) is None


def test_by_difficulty_summarizes_each_bin_and_the_bins_add_up_to_the_whole():
    rows = by_difficulty(RUN, LABELS, ["d1", "d2"])
    got = {(r["bin"], r["strategy"], r["n"], r["metric"]): r for r in rows}
    assert got[("d1", "Y", 4, ACC)]["mean"] == 0.5 and got[("d1", "Y", 4, ACC)]["items"] == 2
    assert got[("d2", "X", 4, ACC)]["tokens"] == 40.0
    assert got[("d2", "samples", 4, "pass@k")]["tokens"] is None
    for key in {(s, n, m) for _, s, n, m in got}:
        whole = [r[4] for r in ROWS if r[1:4] == key]
        parts = [got[(b, *key)] for b in ("d1", "d2")]
        assert math.isclose(sum(p["mean"] * p["items"] for p in parts), sum(whole))


def test_tables_record_the_binning_and_are_none_without_anything_to_bin_by():
    tables = difficulty_tables(RUN)
    binning = tables["by_difficulty"]["binning"]
    assert binning == {"source": "task", "bins": ["d1", "d2"], "thresholds": None,
                       "items": {"d1": 2, "d2": 2}}
    assert tables["compute_optimal"]["binning"] == "task"
    assert len(tables["compute_optimal"]["table"]) == 6
    unlabelled = RunRows(ROWS, {i: None for i in LABELS}, {}, {}, TOKENS)
    assert difficulty_tables(unlabelled) == {"by_difficulty": None, "compute_optimal": None}
    oracle = RunRows(ROWS, {i: None for i in LABELS}, {"a": 1, "b": 1, "c": 0, "d": 0.5}, {},
                     TOKENS)
    tables = difficulty_tables(oracle, k=2)
    assert tables["by_difficulty"]["binning"]["items"] == {"1": 2, "2": 2}
