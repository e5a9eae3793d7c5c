"""The testbed grader: GSM8K extraction, integer comparison."""

import pytest

from metagen.testbed import grade


@pytest.mark.parametrize("text, answer, ok", [
    ("3 + 4 = 7\n#### 7", 7, True),
    ("3 + 4 = 7\n#### 8", 7, False),
    ("#### 1,024", 1024, True),
    ("#### $12.", 12, True),
    ("the answer is 7", 7, True),          # no marker: last number
    ("#### 7\nthen 9", 7, True),
    ("7 and then #### ", 7, False),         # marker without a number
    ("", 0, False),
])
def test_grade(text, answer, ok):
    assert grade(text, answer) is ok
