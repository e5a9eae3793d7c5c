"""MATH answer equivalence (math-verify): a table of equivalent and different answers, the
canonical form, and the timeout paths (main thread: signal alarm; worker thread: abandoned)."""

from __future__ import annotations

import threading
import time

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks import math_equiv
from metagen.tasks.math_equiv import MathEquivalence, canonical_answer

pytest.importorskip("math_verify")

EQ = MathEquivalence()

SAME = [
    (r"\frac{1}{2}", "0.5"), (r"\dfrac12", "1/2"), (r"\tfrac{1}{2}", r"\frac12"), ("0.5", "1/2"),
    (r"\frac{14}{3}", r"\dfrac{14}{3}"), (r"-\frac{1}{2}", "-0.5"), ("-3", "-3.0"),
    ("(1,2]", "(1, 2]"), (r"[-1,\infty)", r"[-1, \infty)"),
    (r"(3,\frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"(3,\frac{\pi}{2})", r"(3,\pi/2)"),
    (r"2\pi", r"\pi\cdot 2"), (r"\frac{\pi}{4}", r"\pi/4"),
    (r"\frac{\sqrt{2}}{2}", r"\frac{1}{\sqrt{2}}"),
    (r"10\text{ cm}", "10"), (r"90^\circ", "90"), (r"50\%", "50"), (r"\$18.90", "18.9"),
    ("1,000", "1000"), (r"\{1,2\}", r"\{2,1\}"), ("x=5", "5"),
]
DIFFERENT = [
    (r"\frac{14}{3}", "3"), (r"\frac{14}{3}", r"\frac{1}{3}"), (r"\frac{1}{3}", "3"),
    ("0.5", "0.05"), ("-3", "3"), (r"-\frac{1}{2}", r"\frac{1}{2}"),
    ("(1,2]", "(1,2)"), ("[1,2]", "(1,2)"),
    (r"(3,\frac{\pi}{2})", r"(\frac{\pi}{2},3)"), (r"(3,\frac{\pi}{2})", "(3,2)"),
    (r"\{1,2\}", r"\{1,3\}"), (r"2\pi", r"\pi"), (r"\sqrt{2}", "2"),
    (r"10\text{ cm}", "100"), (r"50\%", "5"),
]


@pytest.mark.parametrize("a, b", SAME)
def test_equivalent_pairs(a, b):
    assert EQ(a, b) and EQ(b, a)
    assert EQ.gold_matches(a, b)


@pytest.mark.parametrize("a, b", DIFFERENT)
def test_different_pairs(a, b):
    assert not EQ(a, b) and not EQ(b, a)
    assert not EQ.gold_matches(a, b)


def test_no_answer_matches_nothing():
    assert not EQ(None, "1") and not EQ("1", None) and not EQ.gold_matches("1", None)


def test_canonical_form_only_drops_layout():
    assert canonical_answer(r" \left( 3, \dfrac{\pi}{2} \right). ") == r"(3,\frac{\pi}{2})"
    assert canonical_answer(r"$\tfrac12$") == r"\frac12"
    assert canonical_answer("0.5") != canonical_answer(r"\frac{1}{2}")
    with pytest.raises(InvalidParameterError, match="answer"):
        canonical_answer(0.5)  # type: ignore[arg-type]


def test_timeout_must_be_whole_seconds():
    for bad in (0, 1.5, True, "2"):
        with pytest.raises(InvalidParameterError, match="timeout_s"):
            MathEquivalence(bad)  # type: ignore[arg-type]


def _hang(timeout: int | None) -> bool:
    time.sleep(30)
    return True


def test_main_thread_timeout_interrupts_and_answers_default():
    from math_verify.utils import timeout

    def call(t: int | None) -> bool:  # what math-verify does with its own timeout argument
        return timeout(timeout_seconds=t)(_hang)(t)

    start = time.perf_counter()
    assert math_equiv._bounded(call, 1, False) is False
    assert time.perf_counter() - start < 5


def test_worker_thread_timeout_abandons_the_call():
    out: list[tuple[bool, float]] = []

    def in_worker() -> None:
        start = time.perf_counter()
        out.append((math_equiv._bounded(_hang, 1, False), time.perf_counter() - start))

    worker = threading.Thread(target=in_worker)
    worker.start()
    worker.join(10)
    assert out and out[0][0] is False and out[0][1] < 5


def test_equivalence_works_off_the_main_thread():
    out: list[bool] = []
    worker = threading.Thread(target=lambda: out.extend(
        [EQ("0.25", r"\frac14"), EQ(r"\frac{14}{3}", "3")]))
    worker.start()
    worker.join(30)
    assert out == [True, False]


def test_pathological_answer_is_bounded_by_the_timeout():
    # a power tower sympy tries to evaluate: interrupted after timeout_s per parse / verify
    eq = MathEquivalence(timeout_s=1)
    start = time.perf_counter()
    assert not eq("2^{2^{2^{2^{2^{2}}}}}", "3")
    assert time.perf_counter() - start < 8  # about 2 s measured: two 1 s verify timeouts


def test_match_is_not_transitive_on_percentages():
    # documented: math-verify reads 50\% as both 50 and 0.5; a vote groups 50\% with the first
    # class whose representative it matches
    assert EQ(r"50\%", "50") and EQ(r"50\%", "0.5") and not EQ("50", "0.5")
