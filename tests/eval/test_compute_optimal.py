"""The compute-optimal policy on hand-made rows (golden per-bin choices, the stderr guard, the
held-out curve, apply on new items) and the item split (deterministic, per item)."""

from __future__ import annotations

import math

import pytest

from metagen.compute_optimal import fit_policy, held_out_curve, split_items
from metagen.errors import InvalidParameterError
from metagen.eval.runrows import RunRows

ACC = "accuracy"
LABELS = {"f1": "d1", "f2": "d1", "f3": "d1", "h1": "d1", "h2": "d1",
          "f4": "d2", "f5": "d2", "f6": "d2", "h3": "d2", "h4": "d2"}
FIT = ["f1", "f2", "f3", "f4", "f5", "f6"]
HELD = ["h1", "h2", "h3", "h4"]


def _run(x: dict[str, float], y: dict[str, float]) -> RunRows:
    rows = tuple([(i, "X", 4, ACC, v) for i, v in x.items()]
                 + [(i, "Y", 4, ACC, v) for i, v in y.items()])
    return RunRows(rows, LABELS, {}, {}, {})


# X solves every d1 item, Y every d2 item
CLEAR = _run({i: float(d == "d1") for i, d in LABELS.items()},
             {i: float(d == "d2") for i, d in LABELS.items()})


def test_each_bin_gets_its_clear_winner_and_the_held_out_curve_shows_the_gain():
    policy = fit_policy(CLEAR, FIT)
    # overall on the fit split: X 3/6 = Y 3/6, no tokens -> X by name
    assert policy.overall == {4: "X"} and dict(policy.table) == {("d1", 4): "X",
                                                                 ("d2", 4): "Y"}
    [row] = held_out_curve(policy, CLEAR, HELD)
    assert row["policy"]["mean"] == 1.0 and row["policy"]["uses"] == {"X": 2, "Y": 2}
    assert row["fixed"]["X"]["mean"] == 0.5 and row["fixed"]["Y"]["mean"] == 0.5
    assert row["best_fixed"] == "X" and row["gain"] == 0.5
    assert math.isclose(row["gain_stderr"], math.sqrt(1 / 3) / 2)  # diffs (0, 0, 1, 1)
    assert row["items"] == 4 and row["policy"]["tokens"] is None
    assert row["fit_best"] == "X" and row["gain_vs_fit_best"] == [0.5, row["gain_stderr"]]


def test_apply_bins_new_items_and_falls_back_on_the_overall_winner():
    policy = fit_policy(CLEAR, FIT)
    assert policy.apply({"new1": "d2", "new2": "d1", "new3": "d9"}, 4) == {
        "new1": "Y", "new2": "X", "new3": "X"}
    with pytest.raises(InvalidParameterError) as err:
        policy.apply({"new1": "d2"}, 8)
    assert err.value.param == "budget"
    assert policy.to_dict()["table"] == [{"bin": "d1", "n": 4, "strategy": "X"},
                                         {"bin": "d2", "n": 4, "strategy": "Y"}]


def test_a_bin_winner_within_its_paired_stderr_gives_way_to_the_overall_winner():
    # d2 fit items: X = (1, 0, 0), Y = (0, 1, 1): Y leads by 1/3, paired stderr 2/3
    x = {**{i: 1.0 for i in LABELS}, "f4": 1.0, "f5": 0.0, "f6": 0.0}
    y = {**{i: 0.0 for i in LABELS}, "f4": 0.0, "f5": 1.0, "f6": 1.0}
    run = _run(x, y)
    assert fit_policy(run, FIT).table[("d2", 4)] == "X"
    assert fit_policy(run, FIT, min_gain_stderr=0.49).table[("d2", 4)] == "Y"
    assert fit_policy(run, FIT, min_gain_stderr=0.51).table[("d2", 4)] == "X"
    assert fit_policy(run, FIT, min_gain_stderr=0).table[("d2", 4)] == "Y"
    with pytest.raises(InvalidParameterError) as err:
        fit_policy(run, FIT, min_gain_stderr=-1)
    assert err.value.param == "min_gain_stderr"


def test_oracle_bins_are_fitted_on_the_fit_split_and_applied_to_held_out_values():
    pass1 = {"f1": 1.0, "f2": 0.9, "f3": 0.8, "f4": 0.2, "f5": 0.1, "f6": 0.0,
             "h1": 0.95, "h2": 0.5, "h3": 0.3, "h4": 0.05}
    run = RunRows(CLEAR.rows, {i: None for i in LABELS}, pass1, {}, {})
    policy = fit_policy(run, FIT, bins=2)
    assert policy.binning.source == "oracle" and policy.binning.thresholds == (0.2,)
    assert dict(policy.table) == {("1", 4): "X", ("2", 4): "Y"}
    [row] = held_out_curve(policy, run, HELD)
    # h1, h2, h3 (pass@1 > 0.2) -> X, h4 -> Y: right on h1, h2 (d1) and h4 (d2)
    assert row["policy"]["uses"] == {"X": 3, "Y": 1} and row["policy"]["mean"] == 0.75


def test_the_split_is_deterministic_per_item_and_near_the_fraction():
    items = [f"item-{k}" for k in range(1000)]
    fit, held = split_items(items, 0.5)
    assert sorted(fit + held) == sorted(items) and not set(fit) & set(held)
    assert (fit, held) == split_items(list(reversed(items)), 0.5)
    sub_fit, _ = split_items(items[:300], 0.5)
    assert sub_fit == [i for i in fit if i in set(items[:300])]  # a side is the item's own
    # Binomial(1000, 0.5): |fit - 500| > 60 has probability < 2e-4
    assert abs(len(fit) - 500) <= 60
    assert abs(len(split_items(items, 0.2)[0]) - 200) <= 60
    assert split_items(items, 0.5, seed=1) != (fit, held)


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, "half"])
def test_a_bad_fit_fraction_is_a_typed_error(fraction):
    with pytest.raises(InvalidParameterError) as err:
        split_items(["a", "b", "c"], fraction)
    assert err.value.param == "fit_fraction"


def test_a_split_that_leaves_a_side_empty_is_refused():
    with pytest.raises(InvalidParameterError) as err:
        split_items(["only"], 0.5)
    assert err.value.param == "fit_fraction" and "empty" in str(err.value)
