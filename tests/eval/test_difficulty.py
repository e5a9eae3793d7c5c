"""Difficulty bins: task labels in numeric order, quantile bins with hand-computed thresholds
(ties share a bin, a new value is binned by the fitted thresholds), the ``auto`` source order,
and typed errors naming the parameter."""

from __future__ import annotations

import math

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.difficulty import choose_binning, label_order, quantile_binning, task_binning


@pytest.mark.parametrize("labels, expected", [
    (["d10", "d2", "d1", "d2"], ["d1", "d2", "d10"]),
    (["level 5", "level 10", "level 1"], ["level 1", "level 5", "level 10"]),
    (["hard", "easy", "d1"], ["d1", "easy", "hard"]),  # not all numeric: alphabetical
    ([], []),
])
def test_task_labels_are_ordered_by_their_number_when_every_label_has_one(labels, expected):
    assert label_order(labels) == expected
    assert task_binning(labels).order == tuple(expected)


def test_distinct_values_fall_in_equal_quantile_bins_easiest_first():
    values = [10.0, 9, 8, 7, 6, 5, 4, 3, 2, 1]
    binning = quantile_binning(values, "oracle", 5)
    # ranks floor(i * 10 / 5) = 2, 4, 6, 8 of the values sorted high to low
    assert binning.thresholds == (8.0, 6.0, 4.0, 2.0)
    assert [binning.bin_of(v) for v in values] == ["1", "1", "2", "2", "3", "3", "4", "4",
                                                   "5", "5"]
    assert binning.order == ("1", "2", "3", "4", "5")


def test_tied_values_share_a_bin_and_new_values_use_the_fitted_thresholds():
    values = [1.0, 1, 1, 1, 0.5, 0, 0, 0, 0, 0]
    binning = quantile_binning(values, "predicted", 5)
    assert binning.thresholds == (1.0, 0.5, 0.0, 0.0)
    assert [binning.bin_of(v) for v in values] == ["2"] * 4 + ["3"] + ["5"] * 5
    assert binning.bin_of(2.0) == "1" and binning.bin_of(0.7) == "2"
    assert binning.bin_of(-1.0) == "5"
    assert binning.to_dict({"2": 4, "3": 1, "5": 5})["items"] == {
        "1": 0, "2": 4, "3": 1, "4": 0, "5": 5}


def test_one_bin_holds_everything():
    binning = quantile_binning([0.3, 0.9], "oracle", 1)
    assert binning.thresholds == () and {binning.bin_of(v) for v in (0.3, 0.9, 5)} == {"1"}


def test_auto_takes_task_labels_then_pass1_then_mean_score():
    items = ["a", "b"]
    pass1 = {"a": 1.0, "b": 0.0}
    score = {"a": 0.2, "b": 0.9}
    binning, bins = choose_binning(items, {"a": "d2", "b": "d1"}, pass1, score)
    assert binning.source == "task" and bins == {"a": "d2", "b": "d1"}
    assert binning.order == ("d1", "d2")
    binning, bins = choose_binning(items, {"a": "d2", "b": None}, pass1, score, k=2)
    assert binning.source == "oracle" and bins == {"a": "1", "b": "2"}
    binning, bins = choose_binning(items, {}, {"a": 1.0}, score, k=2)
    assert binning.source == "predicted" and bins == {"a": "2", "b": "1"}


def test_a_source_without_values_is_a_typed_error_naming_difficulty():
    with pytest.raises(InvalidParameterError) as err:
        choose_binning(["a"], {"a": None}, {}, {})
    assert err.value.param == "difficulty"
    with pytest.raises(InvalidParameterError) as err:
        choose_binning(["a", "b"], {}, {"a": 0.5}, {}, "oracle")
    assert err.value.param == "difficulty" and "1 item" in str(err.value)
    with pytest.raises(InvalidParameterError) as err:
        quantile_binning([0.1, math.nan], "oracle")
    assert err.value.param == "difficulty"
    for k in (0, -1, True, 2.0):
        with pytest.raises(InvalidParameterError) as err:
            quantile_binning([0.1], "oracle", k)  # type: ignore[arg-type]
        assert err.value.param == "bins"
