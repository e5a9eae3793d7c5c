"""MATH-500: loader, prompt, grader; every gold answer grades correct against itself (with and
without the canonical-form shortcut), and every GSM8K gold answer against its own solution."""

from __future__ import annotations

import json
import time

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks.gsm8k import grade_gsm8k, load_gsm8k
from metagen.tasks.math500 import (
    MATH_ANSWER_KEY,
    MATH_EQUIVALENCE,
    format_math_prompt,
    grade_math,
    load_math500,
    math_answer_key,
)

pytest.importorskip("math_verify")


def test_load_grade_and_prompt(tmp_path):
    path = tmp_path / "mini.jsonl"
    rec = {"problem": "Compute $f(-2)+f(-1)+f(0)$.", "solution": r"... $\boxed{\frac{14}{3}}$",
           "answer": r"\frac{14}{3}", "subject": "Algebra", "level": 3,
           "unique_id": "test/algebra/2584.json"}
    path.write_text(json.dumps(rec) + "\n\n")
    (prob,) = load_math500(path)
    assert prob.uid == "test/algebra/2584.json" and prob.level == 3
    assert r"\boxed{}" in format_math_prompt(prob) and prob.problem in format_math_prompt(prob)
    assert grade_math(prob.solution, prob)
    assert grade_math(r"so \boxed{\dfrac{14}{3}}", prob)
    assert grade_math(r"\boxed{4.666666666}", prob)  # math-verify rounds floats to 6 places
    assert not grade_math(r"\boxed{4.67}", prob)
    assert not grade_math(r"so the answer is 14/3, i.e. \boxed{3}", prob)
    assert not grade_math(r"14/3", prob)  # no boxed answer: never the last number
    assert load_math500(path, limit=0) == []


def test_malformed_record_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "q"}\n')
    with pytest.raises(InvalidParameterError, match="bad.jsonl:1"):
        load_math500(path)
    with pytest.raises(InvalidParameterError, match="limit"):
        load_math500(path, limit=-1)


def test_answer_key_is_boxed_and_math_verify():
    assert MATH_ANSWER_KEY.extract(r"x=3, so \boxed{\frac{14}{3}}") == r"\frac{14}{3}"
    assert MATH_ANSWER_KEY.extract("the answer is 3") is None
    assert MATH_ANSWER_KEY.match(r"\frac{1}{2}", "0.5")
    assert MATH_ANSWER_KEY.canonical is not None
    assert math_answer_key(timeout_s=5).match.timeout_s == 5
    with pytest.raises(InvalidParameterError, match="timeout_s"):
        math_answer_key(timeout_s=0)


def test_every_math500_gold_grades_correct_against_itself(math500_path):
    problems = load_math500(math500_path)
    assert len(problems) == 500
    wrong = [p.uid for p in problems
             if not grade_math(f"Therefore the answer is $\\boxed{{{p.answer}}}$.", p)]
    assert wrong == []


def test_every_math500_reference_solution_grades_correct(math500_path):
    # the data set's own worked solutions: their last \boxed{} is the gold answer
    problems = load_math500(math500_path)
    assert [p.uid for p in problems if not grade_math(p.solution, p)] == []


def test_every_math500_gold_verifies_against_itself_with_math_verify(math500_path):
    # without the canonical-text shortcut: math-verify parses and verifies each gold answer
    problems = load_math500(math500_path)
    start = time.perf_counter()
    failed = [p.uid for p in problems
              if not MATH_EQUIVALENCE._verify(MATH_EQUIVALENCE.parse(p.answer),
                                               MATH_EQUIVALENCE.parse(p.answer))]
    assert failed == []
    assert time.perf_counter() - start < 30  # about 2.5 s measured (parse ~2.5 ms, uncached)


def test_every_gsm8k_test_gold_grades_correct_against_itself(gsm8k_test_path):
    problems = load_gsm8k(gsm8k_test_path)
    assert len(problems) == 1319
    assert [p.uid for p in problems if not grade_gsm8k(p.solution, p)] == []
    assert [p.uid for p in problems if not grade_gsm8k(f"#### {p.answer}", p)] == []
