"""pass@k (Chen et al. 2021): golden values, the exact binomial formula, monotonicity, errors."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks.pass_at_k import mean_pass_at_k, pass_at_k


def exact(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def test_golden_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 1, 10) == 1.0 and pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(200, 0, 100) == 0.0 and pass_at_k(200, 200, 1) == 1.0


def test_equals_the_binomial_formula_for_all_small_cases():
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(exact(n, c, k)), abs=1e-12)


def test_monotone_in_k_and_c():
    for n in (1, 7, 50):
        for c in range(n + 1):
            ks = [pass_at_k(n, c, k) for k in range(1, n + 1)]
            assert ks == sorted(ks)
        for k in range(1, n + 1):
            cs = [pass_at_k(n, c, k) for c in range(n + 1)]
            assert cs == sorted(cs)


def test_stable_where_the_binomials_are_huge():
    assert pass_at_k(100_000, 1, 1) == pytest.approx(1e-5, rel=1e-9)
    assert pass_at_k(2000, 1000, 100) == pytest.approx(float(exact(2000, 1000, 100)), rel=1e-9)


def test_mean_over_problems():
    assert mean_pass_at_k([(10, 3), (10, 0), (4, 4)], 1) == pytest.approx((0.3 + 0 + 1) / 3)


@pytest.mark.parametrize("n, c, k, param", [
    (5, 6, 1, "c"), (5, 1, 6, "k"), (5, 1, 0, "k"), (-1, 0, 1, "n"), (5, -1, 1, "c"),
    (5, 1, -2, "k"), (5.0, 1, 1, "n"), (5, True, 1, "c")])
def test_bad_arguments_are_named(n, c, k, param):
    with pytest.raises(InvalidParameterError) as err:
        pass_at_k(n, c, k)
    assert err.value.param == param
    with pytest.raises(InvalidParameterError, match="counts"):
        mean_pass_at_k([], 1)
