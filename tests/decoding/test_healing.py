"""Token healing's pure rule (metagen.decoding.healing) on two real tokenizers: stories260K's
SentencePiece Llama vocabulary and the testbed policy's byte-level BPE; the allowed sets are
checked against a brute-force scan of the vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import metagen
from metagen.decoding import SequenceState
from metagen.decoding.healing import (
    VocabIndex, heal_prompt, healing_allowed, text_after, vocab_index,
)
from metagen.decoding.processors import process_logits
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"


@pytest.fixture(scope="module")
def stories_tok(stories_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(stories_path)


@pytest.fixture(scope="module")
def policy_tok():
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(POLICY)


def brute_allowed(tok, rest: str) -> tuple[int, ...]:
    """Every non-special, non-byte id whose string starts with ``rest`` or is a non-empty
    proper prefix of it, by a scan of the whole vocabulary."""
    out = []
    for i, piece in enumerate(tok.convert_ids_to_tokens(list(range(len(tok))))):
        if i in tok.all_special_ids or not piece or (piece.startswith("<0x") and len(piece) == 6):
            continue
        if piece.startswith(rest) or (len(piece) < len(rest) and rest.startswith(piece)):
            out.append(i)
    return tuple(sorted(out))


def pieces(tok, ids):
    return tok.convert_ids_to_tokens(list(ids))


@pytest.mark.parametrize("which,rests", [
    ("stories", ["▁ti", "i", "▁", "▁th", "ver", "▁Once"]),
    ("policy", ["Ġ", "Ġfri", "#", "##", "1", "Ġ="]),
])
def test_allowed_equals_a_vocabulary_scan(which, rests, request):
    tok = request.getfixturevalue(f"{which}_tok")
    index = vocab_index(tok)
    for rest in rests:
        got = index.allowed(rest)
        assert got == brute_allowed(tok, rest), rest
        assert got  # every one of these has a token that re-produces it


def test_index_is_cached_per_tokenizer(stories_tok, policy_tok):
    assert vocab_index(stories_tok) is vocab_index(stories_tok)
    assert vocab_index(stories_tok) is not vocab_index(policy_tok)


def test_mid_word_prompt_backs_up_over_its_last_tokens(stories_tok):
    ids = stories_tok("Once upon a ti")["input_ids"]
    assert pieces(stories_tok, ids[-2:]) == ["▁t", "i"]
    index = vocab_index(stories_tok)
    kept, heal = heal_prompt(ids, index, 1)
    assert kept == ids[:-1] and heal is not None and heal.removed == "i"
    kept, heal = heal_prompt(ids, index, 2)
    assert kept == ids[:-2] and heal is not None
    assert heal.removed_ids == tuple(ids[-2:]) and heal.removed == "▁ti"
    assert index.pieces[stories_tok.convert_tokens_to_ids("▁time")] == "▁time"
    assert stories_tok.convert_tokens_to_ids("▁time") in heal.allowed([])


def test_never_removes_a_special_token_or_the_whole_prompt(stories_tok):
    ids = stories_tok("Once upon a ti")["input_ids"]
    assert ids[0] == stories_tok.bos_token_id
    kept, heal = heal_prompt(ids, vocab_index(stories_tok), 8)
    assert kept == ids[:1] and heal is not None and len(heal.removed_ids) == len(ids) - 1
    no_bos = ids[1:]
    kept, heal = heal_prompt(no_bos, vocab_index(stories_tok), 8)
    assert kept == no_bos[:1]  # one token stays to condition on


def test_a_byte_fallback_token_is_not_removed(stories_tok):
    ids = stories_tok("Once upon a \u2603")["input_ids"]  # the snowman has no token: bytes
    assert pieces(stories_tok, ids[-1:])[0].startswith("<0x")
    kept, heal = heal_prompt(ids, vocab_index(stories_tok), 2)
    assert kept == ids and heal is None


def test_a_token_with_no_other_extension_is_left_alone(stories_tok):
    index = vocab_index(stories_tok)
    lone = [i for i in range(len(stories_tok)) if index.heals(i)
            and index.allowed(index.pieces[i]) == (i,)]
    assert lone  # such tokens exist in this vocabulary
    prompt = [stories_tok.bos_token_id, lone[0]]
    assert heal_prompt(prompt, index, 1) == (prompt, None)


def test_multi_token_rule_follows_the_output(stories_tok):
    index = vocab_index(stories_tok)
    tid = stories_tok.convert_tokens_to_ids
    assert healing_allowed(index, "▁ti", []) == index.allowed("▁ti")
    assert healing_allowed(index, "▁ti", [tid("▁t")]) == index.allowed("i")  # continue
    assert healing_allowed(index, "▁ti", [tid("▁t"), tid("i")]) is None        # re-produced
    assert healing_allowed(index, "▁ti", [tid("▁time")]) is None               # extended
    assert healing_allowed(index, "▁ti", [tid("▁a")]) is None                  # left the rule
    assert healing_allowed(index, "▁ti", [tid("▁time"), tid("▁t")]) is None


def test_index_from_explicit_pieces():
    index = VocabIndex(["<s>", "a", "ab", "abc", "b", "", "<0x41>", "abd"], special_ids=[0])
    assert index.allowed("ab") == (1, 2, 3, 7)  # 'a' is a proper prefix; '<s>', '' never
    assert index.extensions("<") == []
    assert not index.heals(0) and not index.heals(5) and not index.heals(6)


def test_processors_keep_only_the_healing_tokens_on_healing_rows(stories_tok):
    ids = stories_tok("Once upon a ti")["input_ids"]
    kept, heal = heal_prompt(ids, vocab_index(stories_tok), 2)
    params = SamplingParams(temperature=0.7)
    rows = [SequenceState(params, kept, heal=heal), SequenceState(params, kept)]
    logits = torch.randn(2, len(stories_tok), generator=torch.Generator().manual_seed(0))
    out = process_logits(logits, rows)
    assert heal is not None
    finite = torch.isfinite(out[0]).nonzero().flatten().tolist()
    assert tuple(finite) == heal.allowed([])
    assert torch.equal(out[1], logits[1] / 0.7)
    forked = rows[0].fork(1)
    assert forked.heal is heal


def test_text_after_a_healed_prompt():
    assert text_after(" ti", " time", lambda: "x", partial=True) == "me"
    assert text_after(" ti", " t", lambda: "x", partial=True) == ""  # only part re-produced
    assert text_after(" ti", " t", lambda: "x") == "x"
    assert text_after(" ti", " a", lambda: "x", partial=True) == "x"


def test_sampling_params_validate_token_healing():
    assert SamplingParams(token_healing=True).heal_tokens == 1
    assert SamplingParams(token_healing=3).heal_tokens == 3
    assert SamplingParams().heal_tokens == 0
    for bad in (9, -1, "yes", 1.0):
        with pytest.raises(InvalidParameterError, match="token_healing"):
            SamplingParams(token_healing=bad)
    pytest.importorskip("llguidance")
    with pytest.raises(InvalidParameterError, match="token_healing.*regex"):
        SamplingParams(token_healing=True, regex="[a-z]+")
