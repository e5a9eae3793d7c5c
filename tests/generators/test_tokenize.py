"""Tokenizer helpers on the real stories260K tokenizer (SentencePiece-style, byte fallback)."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidPromptError
from metagen.generators.tokenize import (
    continuation_text,
    encode_prompt,
    eos_token_ids,
    find_stop,
)


@pytest.fixture(scope="module")
def tok(stories_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(stories_path)


def test_encode_prompt_adds_bos_and_rejects_special_only(tok) -> None:
    assert encode_prompt(tok, "Once upon a time") == [1, 403, 407, 261, 378]
    assert encode_prompt(tok, " ")[0] == 1  # whitespace is a real prompt when it has tokens
    with pytest.raises(InvalidPromptError, match="no tokens"):
        encode_prompt(tok, "<s>")


def test_chat_prompt_without_template_is_a_clear_error(tok) -> None:
    assert not tok.chat_template
    with pytest.raises(InvalidPromptError, match="chat template"):
        encode_prompt(tok, [{"role": "user", "content": "hi"}])


def test_continuation_text_keeps_the_leading_space(tok) -> None:
    prompt = [1, 403, 407, 261, 378]            # "Once upon a time"
    assert continuation_text(tok, prompt, [432, 383]) == ", there"
    assert continuation_text(tok, prompt, [383]) == " there"  # SentencePiece word start
    assert continuation_text(tok, prompt, []) == ""
    ids = tok("x 日本", add_special_tokens=False)["input_ids"]
    assert continuation_text(tok, [1], ids) == "x 日本"        # byte fallback fused


def test_find_stop_earliest_longest_and_window() -> None:
    assert find_stop("a, there was", [" was", "th"]) == (3, "th")
    assert find_stop("abcd", ["bc", "bcd"]) == (1, "bcd")
    assert find_stop("abc", ["x"]) is None
    # a match must end at or after `start`: "ab" ends before index 3
    assert find_stop("ab_ab", ["ab"], start=3) == (3, "ab")
    assert find_stop("ab_ab", ["b_a"], start=3) == (1, "b_a")
    assert find_stop("ab_", ["ab"], start=3) is None
