"""Boxed-answer extraction: nesting, \\fbox, the last answer, truncation, no number fallback."""

import pytest

from metagen.tasks.boxed import extract_math_answer, last_boxed


@pytest.mark.parametrize("text, expected", [
    (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"polar: \boxed{(3,\frac{\pi}{2})}", r"(3,\frac{\pi}{2})"),
    (r"\boxed{\left( 3, \frac{\pi}{2} \right)}", r"\left( 3, \frac{\pi}{2} \right)"),
    (r"first \boxed{1}, then \boxed{\frac{14}{3}}", r"\frac{14}{3}"),
    (r"\boxed{1} then \fbox{2}", "2"),
    (r"\fbox{\sqrt{2}}", r"\sqrt{2}"),
    (r"\boxed{\{1,2\}}", r"\{1,2\}"),
    (r"\boxed{ 10\text{ cm} }", r"10\text{ cm}"),
    (r"The answer is \boxed 5.", "5"),
    (r"\boxed{\text{(C)}}", r"\text{(C)}"),
])
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected
    assert extract_math_answer(text) == expected


@pytest.mark.parametrize("text", [
    r"no box, the answer is 14/3",        # never "last number"
    r"\frac{14}{3}",                      # bare LaTeX: no boxed answer
    r"\boxed{1} and then \boxed{\frac{1}{2}",  # the last one is truncated
    r"\boxed{}",
    r"\boxedx{3}",
])
def test_no_answer(text):
    assert extract_math_answer(text) is None


def test_minerva_final_answer_fallback():
    assert extract_math_answer(r"Final Answer: The final answer is $\frac{14}{3}$. I hope") \
        == r"\frac{14}{3}"


def test_rejects_non_str():
    with pytest.raises(TypeError, match="text must be str"):
        last_boxed(3)  # type: ignore[arg-type]
