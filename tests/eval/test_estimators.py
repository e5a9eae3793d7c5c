"""The unbiased estimators against exact enumeration of every subset."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.estimators import mean_stderr, subsets
from metagen.tasks.pass_at_k import pass_at_k


@pytest.mark.parametrize("n", [1, 2, 3, 5, 7])
def test_pass_at_k_equals_the_fraction_of_subsets_with_a_correct_sample(n):
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            combos = list(itertools.combinations(range(n), k))
            exact = sum(any(correct[j] for j in s) for s in combos) / len(combos)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_is_stable_for_large_n():
    # 1 - C(n-c, k)/C(n, k) with exact big-integer arithmetic as the reference
    n, c, k = 1000, 3, 100
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize("n,c,k", [(0, 0, 1), (4, 5, 1), (4, 1, 0), (4, 1, 5), (4, -1, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(InvalidParameterError):
        pass_at_k(n, c, k)


def test_subsets_enumerates_all_when_few():
    assert subsets(4, 2, 32, seed=0) == list(itertools.combinations(range(4), 2))
    assert subsets(4, 4, 1, seed=0) == [(0, 1, 2, 3)]


def test_random_subsets_are_distinct_sized_and_seeded():
    got = subsets(16, 4, 32, seed=7)
    assert len(got) == 32 and len(set(got)) == 32
    assert all(len(s) == 4 and list(s) == sorted(set(s)) and max(s) < 16 for s in got)
    assert got == subsets(16, 4, 32, seed=7)
    assert got != subsets(16, 4, 32, seed=8)


def test_random_subsets_average_is_unbiased_for_majority_like_metrics():
    # the mean of a per-subset statistic over many random subsets approaches its mean over
    # all subsets; with 2000 draws of C(12, 3) = 220 subsets the gap is far below 0.05
    values = [1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1]
    stat = lambda s: float(sum(values[j] for j in s) >= 2)  # noqa: E731
    exact = statistics.mean(stat(s) for s in itertools.combinations(range(12), 3))
    drawn = subsets(12, 3, 200, seed=1)
    assert abs(statistics.mean(stat(s) for s in drawn) - exact) < 0.05


def test_mean_stderr_matches_statistics():
    values = [0.0, 1.0, 0.5, 0.25, 1.0]
    mean, err = mean_stderr(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert err == pytest.approx(statistics.stdev(values) / math.sqrt(len(values)))
    assert mean_stderr([0.5]) == (0.5, 0.0)
    assert all(math.isnan(x) for x in mean_stderr([]))
