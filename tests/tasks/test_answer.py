"""GSM8K-style answer extraction and comparison: golden values on the formats graders meet."""

import pytest

from metagen.tasks.answer import answers_match, extract_answer, normalize_number


@pytest.mark.parametrize("text, expected", [
    ("5 + 3 = 8\n#### 8", "8"),
    ("#### 1,234", "1234"),
    ("#### $1,000", "1000"),
    ("#### 42.", "42"),
    ("#### -7", "-7"),
    ("#### 18.0", "18"),
    ("#### 2.50", "2.5"),
    ("#### 3\nmore text 99", "3"),             # first number after the last marker
    ("#### 1\n#### 2", "2"),                   # the last marker wins
    ("She makes 9 * 2 = $18 every day.", "18"),  # no marker: the last number
    ("The answer is 1,000.", "1000"),
    ("It costs $5.", "5"),
    ("no numbers here", None),
    ("#### ", None),                           # a marker without a number is no answer
    ("", None),
])
def test_extract_answer_golden(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_on_a_real_gsm8k_reference():
    ref = ("Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\n"
           "She makes 9 * 2 = $<<9*2=18>>18 every day at the farmer's market.\n#### 18")
    assert extract_answer(ref) == "18"


@pytest.mark.parametrize("a, b, same", [
    ("1,000", "1000", True), ("$5", "5", True), ("5.", 5, True), ("18.0", "18", True),
    ("2.5", "2.50", True), ("-0", "0", True), ("7", "8", False), (None, "1", False),
    ("abc", "abc", False), (42, 42.0, True),
])
def test_answers_match(a, b, same):
    assert answers_match(a, b) is same


def test_normalize_number_rejects_non_numbers():
    assert normalize_number("abc") is None
    assert normalize_number("$") is None
    assert normalize_number("nan") is None


def test_extract_answer_rejects_non_str():
    with pytest.raises(TypeError):
        extract_answer(42)  # type: ignore[arg-type]
