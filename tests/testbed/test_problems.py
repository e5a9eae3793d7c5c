"""The problem generator: determinism by seed, disjoint splits, every solution verifies."""

import random

import pytest

from metagen.errors import InvalidParameterError
from metagen.testbed.paths import is_well_formed, step_is_correct, verify_solution
from metagen.testbed.problems import (Problem, format_prompt, grade, make_problem, make_problems,
                                      split_of)


def test_deterministic_by_seed():
    a = make_problems("train", 30, seed=3)
    b = make_problems("train", 30, seed=3)
    c = make_problems("train", 30, seed=4)
    assert a == b
    assert [p.question for p in a] != [p.question for p in c]
    assert make_problems("test", 10) == make_problems("test", 10)


def test_splits_never_overlap():
    qs = {s: {p.question for p in make_problems(s, 300, seed=0)} for s in ("train", "val", "test")}
    assert not qs["train"] & qs["val"] and not qs["train"] & qs["test"] and not qs["val"] & qs["test"]
    # membership is a function of the text, so other seeds cannot collide either
    assert all(split_of(q) == "val" for q in qs["val"])
    other = {p.question for p in make_problems("train", 300, seed=1)}
    assert not other & qs["test"]


def test_every_solution_verifies_and_is_graded_correct():
    for p in make_problems("val", 240, seed=0, difficulties=(1, 2, 3, 4, 5, 6, 7, 8)):
        assert isinstance(p, Problem) and p.answer >= 0
        assert len(set(p.solutions)) == len(p.solutions) >= 1
        for s in p.solutions:
            assert verify_solution(s, p.answer), s
            assert is_well_formed(s) and grade(s, p.answer)
            assert not s.endswith("\n") and s.endswith(f"#### {p.answer}")
        # the shortest path has exactly `difficulty` steps
        assert min(s.count("\n") for s in p.solutions) == p.difficulty


def test_difficulties_are_balanced_and_paths_diverse():
    probs = make_problems("test", 120, seed=0)
    assert [p.difficulty for p in probs[:6]] == [1, 2, 3, 4, 5, 6]
    hard = [p for p in probs if p.difficulty >= 4]
    # several paths with different intermediate values for most multi-step problems
    multi = [p for p in hard if len({frozenset(s.split("\n")[:-1]) for s in p.solutions}) >= 2]
    assert len(multi) >= 0.8 * len(hard)


def test_prompt_format():
    p = make_problems("test", 1)[0]
    assert format_prompt(p) == f"Question: {p.question}\nAnswer:\n"


def test_bad_arguments():
    with pytest.raises(InvalidParameterError):
        make_problems("dev", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError):
        make_problems("train", -1)
    with pytest.raises(InvalidParameterError):
        make_problems("train", 1, difficulties=[0])


def test_step_checks():
    assert step_is_correct("23 + 19 = 42") is True
    assert step_is_correct("23 + 19 = 43") is False
    assert step_is_correct("96 / 4 = 24") is True
    assert step_is_correct("#### 42") is None
    assert not verify_solution("23 + 19 = 43\n#### 43", 43)
    assert not is_well_formed("23 + 19 = 42\nso 42")


def test_make_problem_may_reject_but_never_returns_invalid():
    rng = random.Random(0)
    for d in range(1, 9):
        for _ in range(20):
            p = make_problem(rng, d)
            if p is not None:
                assert all(verify_solution(s, p.answer) for s in p.solutions)
