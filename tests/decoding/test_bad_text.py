"""``bad_words`` ban text, not token sequences: the rule on a hand-made vocabulary (a banned string
straddling two and three tokens), the token-text tables of the real tokenizers against their own
``decode``, and seeded sampling on stories260K (engine and transformers) and the testbed policy,
where no sample contains the banned string however the model spells it."""

from __future__ import annotations

from pathlib import Path

import pytest

import metagen
from metagen.decoding.bad_text import BadText
from metagen.decoding.token_text import TokenTexts, build_token_texts
from metagen.generators.tokenize import continuation_text
from metagen.types import SamplingParams

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"

#            0     1     2     3      4      5      6        7     8     9      10
VOCAB = [b"", b"L", b"i", b"l", b"y", b"Li", b"ly", b"Lily", b" ", b"x", b"yxL"]


def _ban(*words: str) -> BadText:
    return BadText(words, TokenTexts(VOCAB))


def _text(ids: list[int]) -> bytes:
    return b"".join(VOCAB[t] for t in ids)


def test_rule_on_a_hand_made_vocabulary() -> None:
    ban = _ban("Lily")
    assert sorted(ban.banned([])) == [7]                   # only the token holding it whole
    assert sorted(ban.banned([5])) == [6, 7]               # "Li" + "ly"
    assert sorted(ban.banned([1, 2, 3])) == [4, 7, 10]     # "Lil" + "y" or + "yxL"
    assert sorted(ban.banned([1, 2])) == [6, 7]            # "L" + "i" + "ly"
    assert sorted(ban.banned([1])) == [7]                  # "L" + "i": not yet
    assert sorted(ban.banned([5, 8])) == [7]               # the space broke it
    assert sorted(ban.banned([9, 10, 2])) == [6, 7]        # "yxL" + "i" ends in "Li"
    assert sorted(ban.banned([0, 5, 0])) == [6, 7]         # empty (special) tokens add nothing


def test_rule_equals_the_definition_on_every_short_output() -> None:
    """Exhaustive over outputs of up to 3 tokens: a token is banned exactly when the text with it
    contains a banned string the text without it does not."""
    import itertools
    words = ("Lily", "yx", "l")
    ban = _ban(*words)
    encoded = [w.encode() for w in words]
    for n in range(4):
        for out in itertools.product(range(len(VOCAB)), repeat=n):
            before = _text(list(out))
            expected = {t for t in range(len(VOCAB))
                        if any(w in before + VOCAB[t] and w not in before for w in encoded)}
            got = set(ban.banned(list(out)))
            # tokens completing a word already in the output are banned too (harmless: the
            # backends keep every output free of the words, so `before` never holds one)
            assert expected <= got, (out, expected, got)
            if not any(w in before for w in encoded):
                assert got == expected, (out, expected, got)


def test_tokens_holding_a_word_whole_are_found_across_empty_and_nul_tokens() -> None:
    table = [b"ab", b"", b"\0a", b"b\0", b"xaby", b"", b"a", b"b", b"abab"]
    texts = TokenTexts(table)
    for word in (b"ab", b"a", b"b", b"\0", b"a\0", b"ba"):
        assert texts.containing(word) == tuple(i for i, b in enumerate(table) if word in b)


@pytest.mark.parametrize("folder", ["stories", "policy"])
def test_token_texts_concatenate_to_the_decoded_text(folder, stories_path) -> None:
    """SentencePiece with byte fallback (stories260K) and byte-level BPE (the testbed): the
    table's bytes of a tokenized text are the text the tokenizer decodes after a prompt."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(stories_path if folder == "stories" else POLICY)
    texts = build_token_texts(tok)
    prompt = tok("Once upon a time")["input_ids"]
    for text in (" there was Lily", "x = $3\n#### 3", " 日本 é", "a\n\nb  c"):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        table = b"".join(texts.table[t] for t in ids).decode("utf-8")
        assert table == continuation_text(tok, prompt, ids)
    for special in tok.all_special_ids:
        assert texts.table[special] == b""


def _samples(gen, prompt: str, params: SamplingParams) -> list[str]:
    [comps] = gen.generate([prompt], params)
    return [c.text for c in comps]


PARAMS = SamplingParams(n=32, temperature=1.0, max_tokens=48, seed=7)


@pytest.mark.parametrize("word", ["Lily", " Lily", "ily"])
def test_engine_samples_never_contain_a_banned_word(stories_path, word) -> None:
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(stories_path) as gen:
        free = _samples(gen, "Once upon a time", PARAMS)
        banned = _samples(gen, "Once upon a time", PARAMS.with_(bad_words=(word,)))
    assert sum(word in t for t in free) >= 8  # the test bites: the model says it often
    assert not [t for t in banned if word in t]


def test_hf_samples_never_contain_a_banned_word(stories_path) -> None:
    """``"ily"`` is inside the tokens of ``"Lily"``, ``"family"``, ...: no token sequence of its
    own would ban it."""
    from metagen.generators.hf import HFGenerator
    gen = HFGenerator.from_pretrained(stories_path)
    free = _samples(gen, "Once upon a time", PARAMS)
    banned = _samples(gen, "Once upon a time", PARAMS.with_(bad_words=("ily",)))
    assert sum("ily" in t for t in free) >= 8
    assert not [t for t in banned if "ily" in t]


def test_testbed_policy_never_writes_a_banned_operator() -> None:
    """Banning ``" = "`` on the testbed policy (its answers are ``a - b = c`` lines)."""
    from metagen.generators.local import LocalGenerator
    from metagen.testbed.problems import format_prompt, make_problems
    prompt = format_prompt(make_problems("test", 1, seed=0)[0])
    params = SamplingParams(n=8, temperature=1.0, max_tokens=32, seed=3)
    with LocalGenerator.from_pretrained(POLICY) as gen:
        free = _samples(gen, prompt, params)
        banned = _samples(gen, prompt, params.with_(bad_words=(" = ",)))
    assert all(" = " in t for t in free)
    assert not [t for t in banned if " = " in t]


@pytest.mark.parametrize("spec", [{"prompt_lookup": 2}, {"speculative_model": "self"}])
def test_speculative_engines_ban_the_same(stories_path, spec) -> None:
    """Drafted and verified tokens go through the same ban: the speculative engine's greedy
    text equals the plain engine's with bad words, and its samples (the same distribution,
    not the same draws: speculative sampling uses its own random streams) never hold one."""
    from metagen.generators.local import LocalGenerator
    options = {k: (str(stories_path) if v == "self" else v) for k, v in spec.items()}
    params = PARAMS.with_(n=4, bad_words=("Lily", " the"))
    greedy = SamplingParams(temperature=0.0, max_tokens=48, bad_words=("Lily", " the"))
    with LocalGenerator.from_pretrained(stories_path) as plain:
        want = [_samples(plain, "Once upon a time", p) for p in (params, greedy)]
    with LocalGenerator.from_pretrained(stories_path, num_speculative_tokens=3,
                                        **options) as fast:
        got = [_samples(fast, "Once upon a time", p) for p in (params, greedy)]
    assert got[1] == want[1]
    assert not [t for texts in got for t in texts if "Lily" in t or " the" in t]
