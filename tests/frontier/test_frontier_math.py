"""The FLOPs-budget frontier on hand-made rows of two models: golden budget grids, candidate
allowance per budget (overall and within a bin), per-bin choices with the stderr guard, the
held-out gains and FLOPs, and Pareto membership."""

from __future__ import annotations

import math

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.cost import FLOPS
from metagen.eval.runrows import RunRows
from metagen.frontier.budgets import allowed, budget_grid, check_budgets
from metagen.frontier.candidates import parse_labelled, pool_candidates
from metagen.frontier.held_out import held_out_frontier, pareto
from metagen.frontier.policy import fit_flops_policy

ACC = "accuracy"
LABELS = {"f1": "d1", "f2": "d1", "f3": "d1", "h1": "d1", "h2": "d1",
          "f4": "d2", "f5": "d2", "f6": "d2", "h3": "d2", "h4": "d2"}
FIT = ["f1", "f2", "f3", "f4", "f5", "f6"]
HELD = ["h1", "h2", "h3", "h4"]
D1 = {i for i, d in LABELS.items() if d == "d1"}


def _rows(strategy: str, n: int, acc: dict[str, float], flops: dict[str, float] | None
          ) -> list[tuple[str, str, int, str, float]]:
    return ([(i, strategy, n, ACC, v) for i, v in acc.items()]
            + [(i, strategy, n, FLOPS, v) for i, v in (flops or {}).items()])


def _each(value_d1: float, value_d2: float) -> dict[str, float]:
    return {i: value_d1 if i in D1 else value_d2 for i in LABELS}


# small model s: greedy (1 FLOP, solves d1), vote@4 (4 FLOPs, d1 and f4, h3 of d2);
# large model l: greedy (6 FLOPs on d1, 14 on d2: mean 10 on the fit split; solves all),
# vote@2 (8 FLOPs; solves d2 only); r: no FLOP counts (a remote policy)
SMALL = _rows("greedy", 1, _each(1, 0), _each(1, 1)) + _rows(
    "vote", 4, {**_each(1, 0), "f4": 1.0, "h3": 1.0}, _each(4, 4))
LARGE = _rows("greedy", 1, _each(1, 1), _each(6, 14)) + _rows("vote", 2, _each(0, 1),
                                                               _each(8, 8))
CANDS = pool_candidates({m: RunRows(tuple(rows), LABELS, {}, {}, {}) for m, rows in (
    ("s", SMALL), ("l", LARGE), ("r", _rows("greedy", 1, _each(1, 1), None)))})


def test_the_default_grid_is_1_2_5_spanning_the_means_and_explicit_budgets_are_checked():
    assert budget_grid([1, 4, 10]) == [1.0, 2.0, 5.0, 10.0]
    assert budget_grid([3.7e7, 8e8]) == [5e7, 1e8, 2e8, 5e8, 1e9]
    assert budget_grid([3.0, 3.0]) == [5.0]
    assert check_budgets([20, 5, 5.0]) == [5.0, 20.0]
    for bad in ([], [0.0], [-1.0], [math.inf], [math.nan]):
        with pytest.raises(InvalidParameterError) as err:
            check_budgets(bad)
        assert err.value.param == "budgets"


def test_candidates_without_a_flop_count_are_skipped_and_allowance_is_by_mean_flops():
    assert CANDS.names == ["l/greedy@1", "l/vote@2", "s/greedy@1", "s/vote@4"]
    assert CANDS.skipped == ("r/greedy@1",)
    assert CANDS.parts["l/vote@2"] == ("l", "vote", 2)
    assert allowed(CANDS, FIT, 0.5) == []
    assert allowed(CANDS, FIT, 1) == ["s/greedy@1"]
    assert allowed(CANDS, FIT, 9.99) == ["l/vote@2", "s/greedy@1", "s/vote@4"]
    assert allowed(CANDS, FIT, 10) == CANDS.names  # l/greedy: (3 x 6 + 3 x 14) / 6 = 10
    assert "l/greedy@1" not in allowed(CANDS, ["f4", "f5", "f6"], 10)  # 14 on d2
    assert "l/greedy@1" in allowed(CANDS, ["f1", "f2", "f3"], 6)


def test_per_bin_choices_follow_the_budget_and_the_stderr_guard():
    policy = fit_flops_policy(CANDS, FIT, [0.5, 1, 5, 8, 10], min_gain_stderr=1)
    assert dict(policy.overall) == {1: "s/greedy@1", 5: "s/vote@4", 8: "s/vote@4",
                                    10: "l/greedy@1"}  # 0.5 allows none: not fitted
    # 5: d1's best is s/greedy (ties s/vote on accuracy, fewer FLOPs) but gains 0: s/vote.
    # 8: d2's l/vote beats s/vote on (f4, f5, f6) by diffs (0, 1, 1): 2/3 > 1 x stderr 1/3.
    # 10: d2 allows no l/greedy (14 > 10); its best, s/vote, loses to l/greedy: fallback.
    assert dict(policy.table) == {
        ("d1", 1): "s/greedy@1", ("d2", 1): "s/greedy@1", ("d1", 5): "s/vote@4",
        ("d2", 5): "s/vote@4", ("d1", 8): "s/vote@4", ("d2", 8): "l/vote@2",
        ("d1", 10): "l/greedy@1", ("d2", 10): "l/greedy@1"}
    strict = fit_flops_policy(CANDS, FIT, [8], min_gain_stderr=2)  # 2/3 is not > 2 x 1/3
    assert strict.candidate("d2", 8) == "s/vote@4"
    with pytest.raises(InvalidParameterError) as err:
        fit_flops_policy(CANDS, FIT, [0.5])
    assert err.value.param == "budgets"
    with pytest.raises(InvalidParameterError) as err:
        policy.candidate("d1", 3)
    assert err.value.param == "budget"


def test_the_held_out_row_scores_the_policy_against_the_best_and_the_fit_splits_fixed_choice():
    policy = fit_flops_policy(CANDS, FIT, [8, 10], min_gain_stderr=1)
    row8, row10 = held_out_frontier(policy, CANDS, FIT, HELD)
    # h1, h2 (d1) get s/vote (correct, 4 FLOPs); h3, h4 (d2) get l/vote (correct, 8 FLOPs)
    assert row8["policy"]["mean"] == 1.0 and row8["policy"]["stderr"] == 0.0
    assert row8["policy"]["flops"] == 6.0 and row8["policy"]["fit_flops"] == 6.0
    assert row8["policy"]["uses"] == {"l/vote@2": 2, "s/vote@4": 2}
    # held-out accuracies of the allowed: s/greedy .5, s/vote .75, l/vote .5
    assert row8["best_fixed"] == "s/vote@4" and row8["fit_best"] == "s/vote@4"
    assert row8["gain"] == 0.25 and row8["gain_stderr"] == 0.25  # diffs (0, 0, 0, 1)
    assert row8["gain_vs_fit_best"] == [0.25, 0.25]
    # at 10 the fallback on l/greedy in d2 spends 14 there: the policy's fit mean is 10
    assert row10["policy"]["uses"] == {"l/greedy@1": 4} and row10["policy"]["fit_flops"] == 10.0
    assert row10["best_fixed"] == "l/greedy@1" and row10["gain"] == 0.0


def test_the_frontier_keeps_exactly_the_undominated_candidates():
    assert pareto({"a": (1, 0.5), "b": (4, 0.75), "c": (8, 0.5), "d": (10, 1.0)}) == [
        "a", "b", "d"]  # c: b has more accuracy at fewer FLOPs
    assert pareto({"a": (1, 0.5), "b": (1, 0.5), "c": (1, 0.4), "d": (2, 0.5)}) == ["a", "b"]
    assert pareto({}) == []


def test_labelled_entries_parse_and_malformed_ones_name_label(tmp_path):
    assert parse_labelled("runs/x") == (None, "runs/x")
    assert parse_labelled("big=runs/x") == ("big", "runs/x")
    odd = tmp_path / "a=b"
    odd.mkdir()
    assert parse_labelled(str(odd)) == (None, str(odd))  # an existing folder is a folder
    for bad in ("=runs/x", "big=", "a/b=runs/x"):
        with pytest.raises(InvalidParameterError) as err:
            parse_labelled(bad)
        assert err.value.param == "label"
