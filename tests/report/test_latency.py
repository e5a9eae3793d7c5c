"""The report's wall-time numbers against hand values: quantiles by linear interpolation, the
per-item latency fields and throughput = items / the union of their stored intervals, the times
read from the stored traces (none when any item lacks one), and the model's points carrying
them."""

from __future__ import annotations

import math

import pytest

from metagen.eval.timing import SECONDS, STARTED
from metagen.report import build_report
from metagen.report.latency import busy_seconds, item_times, latency, quantile, run_latency
from tests.report.runs import make_sc_run, make_tree_run


def test_quantiles_interpolate_between_order_statistics():
    values = [4.0, 1.0, 3.0, 2.0]  # sorted 1 2 3 4: position q * 3
    assert quantile(values, 0.0) == 1.0 and quantile(values, 1.0) == 4.0
    assert quantile(values, 0.5) == 2.5
    assert quantile(values, 0.9) == pytest.approx(3.7)
    assert quantile([7.0], 0.9) == 7.0
    assert quantile([0.0, 10.0], 0.25) == 2.5
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_busy_seconds_is_the_length_of_the_union_of_the_intervals():
    # [0, 2] and [1, 4] overlap -> [0, 4]; [10, 11] apart; one without a start adds its 5 s
    assert busy_seconds([2.0, 3.0, 1.0, 5.0], [0.0, 1.0, 10.0, None]) == 4.0 + 1.0 + 5.0
    assert busy_seconds([5.0, 1.0], [0.0, 2.0]) == 5.0  # one inside the other
    assert busy_seconds([1.0, 1.0], [None, None]) == 2.0 and busy_seconds([], []) == 0.0


def test_latency_fields_and_throughput_are_items_over_busy_seconds():
    got = latency([1.0, 2.0, 3.0, 10.0])  # no starts: busy = the sum
    assert got == {"seconds": 4.0, "p50": 2.5, "p90": pytest.approx(7.9),
                   "throughput": 4 / 16.0}
    assert got["p50"] <= got["p90"]
    # two items run at once (both began at 0): 2 items in 3 busy seconds, not in 5
    assert latency([2.0, 3.0], [0.0, 0.0])["throughput"] == 2 / 3.0
    assert latency([0.0, 0.0])["throughput"] is None  # no time spent: no rate
    assert latency([0.0, 0.0])["p90"] == 0.0
    none = dict.fromkeys(("seconds", "p50", "p90", "throughput"))
    assert latency([]) == none and latency([1.0, math.nan]) == none
    assert latency([1.0, -1.0]) == none


def test_times_are_read_per_strategy_and_n_from_the_traces():
    rows = [("sc", 1, "accuracy", 1.0, {SECONDS: 2.0, STARTED: 5.0}),
            ("sc", 4, "accuracy", 0.0, {SECONDS: 2.0}),
            ("sc", 1, "generated_tokens", 9.0, {}),  # a cost row: no time, not a gap
            ("beam", 2, "accuracy", 1.0, {"usage": {}}),  # a store from before timing
            ("samples", 1, "pass@k", 0.5, {SECONDS: True})]  # not a number
    got = item_times(rows)
    assert got[("sc", 1)] == (2.0, 5.0) and got[("sc", 4)] == (2.0, None)
    assert math.isnan(got[("beam", 2)][0]) and math.isnan(got[("samples", 1)][0])
    table = run_latency({"a": [("sc", 1, "accuracy", 1.0, {SECONDS: 1.0, STARTED: 0.0})],
                         "b": [("sc", 1, "accuracy", 0.0, {SECONDS: 3.0, STARTED: 0.0})],
                         "c": [("sc", 2, "accuracy", 0.0, {SECONDS: 3.0})],
                         "d": [("sc", 2, "accuracy", 0.0, {})]})
    # a and b ran at once: 2 items in 3 busy seconds
    assert table[("sc", 1)] == {"seconds": 2.0, "p50": 2.0, "p90": pytest.approx(2.8),
                                "throughput": 2 / 3.0}
    assert table[("sc", 2)]["throughput"] is None  # item d has no time: the point has none


def test_the_model_points_carry_the_latency_of_the_stored_times(tmp_path):
    model = build_report([make_sc_run(tmp_path / "sc"), make_tree_run(tmp_path / "t")])
    sc, tree = model["runs"]
    assert sc["task"] == "testbed"
    point = {p["n"]: p for c in sc["curves"] if c["strategy"] == "self_consistency"
             for p in c["points"]}
    # runs.py stores item a 2.0 s (from 100) and item b 6.0 s (from 110) at every N
    for n in (1, 4):
        assert point[n]["seconds"] == 4.0 and point[n]["p50"] == 4.0
        assert point[n]["p90"] == pytest.approx(5.6)
        assert point[n]["throughput"] == 2 / 8.0  # items / their busy seconds (apart: 2 + 6)
    beam = {p["n"]: p for p in tree["curves"][0]["points"]}
    assert beam[2]["seconds"] == 0.5 and beam[4]["p90"] == 1.5 and beam[4]["throughput"] == 1 / 1.5
