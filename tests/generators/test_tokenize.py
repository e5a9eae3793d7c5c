"""Tokenizer helpers on the real stories260K tokenizer (SentencePiece-style, byte fallback)."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidPromptError
from metagen.generators.tokenize import (
    bad_words_ids,
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


def test_bad_words_have_both_word_start_forms(tok) -> None:
    ids = bad_words_ids(tok, ["there"])
    assert (383,) in ids          # "▁there"
    assert all(ids)


def test_eos_token_ids(tok, stories_path) -> None:
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(stories_path)
    assert eos_token_ids(model, tok) == (2,)


def test_fast_decode_equals_tokenizer_decode(tok) -> None:
    from metagen.generators.tokenize import decode_ids
    ids = tok("Once upon a time, there was 日本 </s> a cat.\n")["input_ids"]
    assert decode_ids(tok, ids) == tok.decode(ids, skip_special_tokens=True)


CHATML = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
          "{% if not loop.last or m['role'] != 'assistant' %}</s>\n{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")


def test_a_conversation_ending_with_the_assistant_is_continued(tok) -> None:
    """Step searches grow a chat model's partial answer: extend_prompt puts the steps so far in
    the assistant message, and render_prompt leaves that message open (no end of turn, no new
    generation prompt), so the model continues it."""
    from copy import copy

    from metagen.generators.base import continues_assistant, extend_prompt, render_prompt

    chat_tok = copy(tok)
    chat_tok.chat_template = CHATML
    question = [{"role": "user", "content": "What is 2+3?"}]
    assert render_prompt(chat_tok, question) == "<|user|>\nWhat is 2+3?</s>\n<|assistant|>\n"
    assert extend_prompt(question, "") is question and not continues_assistant(question)
    partial = extend_prompt(question, "Step 1: 2+3=5.\n")
    assert continues_assistant(partial)
    assert question == [{"role": "user", "content": "What is 2+3?"}]  # not mutated
    assert render_prompt(chat_tok, partial) == \
        "<|user|>\nWhat is 2+3?</s>\n<|assistant|>\nStep 1: 2+3=5.\n"
    more = extend_prompt(partial, "The answer is 5.")
    assert more[-1] == {"role": "assistant", "content": "Step 1: 2+3=5.\nThe answer is 5."}
    assert render_prompt(chat_tok, more).startswith(render_prompt(chat_tok, partial))
    assert extend_prompt("Q: 2+3?\n", "A: 5") == "Q: 2+3?\nA: 5"
