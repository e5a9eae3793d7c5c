"""Tokenizer round trips and boundaries; AUROC golden values; step splitting."""

import math

from metagen.testbed.metrics import auroc, split_steps
from metagen.testbed.problems import format_prompt, make_problems
from metagen.testbed.tokenizer import Codec, build_tokenizer, save_tokenizer


def test_tokenizer_round_trip_and_boundaries():
    codec = Codec()
    for p in make_problems("val", 30):
        prompt = format_prompt(p)
        for s in p.solutions:
            ids = codec.encode(prompt + s)
            assert ids[0] == codec.bos
            assert codec.decode(ids) == prompt + s
            # tokens of prompt + completion = prompt tokens + completion tokens (prompt ends in \n)
            assert ids == codec.encode(prompt) + codec.encode(s, bos=False)
    # digits are single tokens
    assert len(codec.encode("1234567890", bos=False)) == 10


def test_autotokenizer_loads_the_saved_folder(tmp_path):
    from transformers import AutoTokenizer

    save_tokenizer(build_tokenizer(), tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    codec = Codec()
    text = "Question: Ann has 5 apples.\nAnswer:\n5 + 3 = 8\n#### 8"
    assert tok(text)["input_ids"] == codec.encode(text)
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (codec.bos, codec.eos, codec.pad)
    assert tok.decode(codec.encode(text), skip_special_tokens=True) == text


def test_auroc_golden():
    assert auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75
    assert auroc([1, 2, 3], [0, 1, 1]) == 1.0
    assert auroc([3, 2, 1], [0, 1, 1]) == 0.0
    assert auroc([0.5, 0.5], [0, 1]) == 0.5
    assert math.isnan(auroc([0.1, 0.2], [1, 1]))


def test_split_steps():
    c = "1 + 2 = 3\n3 * 2 = 6\n#### 6"
    assert split_steps(c) == ["1 + 2 = 3\n", "3 * 2 = 6\n", "#### 6"]
    assert "".join(split_steps(c)) == c
