"""The answer after a thinking model's ``<think>...</think>`` block: golden cases."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks.thinking import answer_after_thinking


@pytest.mark.parametrize(("text", "end", "answer"), [
    ("<think>2 + 2 = 5? no, 4</think>\n\nThe answer is \\boxed{4}.", "</think>",
     "The answer is \\boxed{4}."),
    # the template opened the block: only its end is in the completion
    ("so 7 * 6 = 42\n</think>\n#### 42", "</think>", "#### 42"),
    # the last end token counts (a block that mentions the token, or two blocks)
    ("<think>a</think> draft 3 <think>b</think> final 5", "</think>", "final 5"),
    # closed, then nothing: an empty answer (no answer to extract, but not "never closed")
    ("<think>hmm</think>", "</think>", ""),
    # a configurable end token (lm-eval's think_end_token)
    ("reasoning 1 2 3 [END THOUGHT] 9", "[END THOUGHT]", "9"),
    # never closed: no answer, whatever numbers the reasoning holds
    ("<think>13 + 29 = 42, so #### 42", "</think>", None),
    ("plain answer #### 42", "</think>", None),
    ("", "</think>", None),
])
def test_answer_after_thinking_golden(text, end, answer):
    assert answer_after_thinking(text, end) == answer


@pytest.mark.parametrize("end", ["", " </think>", None, 3])
def test_a_bad_end_token_names_think_end_token(end):
    with pytest.raises(InvalidParameterError, match="think_end_token"):
        answer_after_thinking("x</think>y", end)
