"""Output constraints: SamplingParams fields (V19), the bitmask layout, and the per-sequence
matcher's sync / rollback / fork against llguidance's own matcher on a real tokenizer."""

from __future__ import annotations

import re

import pytest
import torch

from metagen.constraints import INSTALL_HINT
from metagen.decoding.masks import unpack_bitmask
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams


def test_two_constraints_are_refused_naming_both() -> None:
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(regex="[0-9]+", choice=["a", "b"])
    assert info.value.param == "regex and choice"
    with pytest.raises(InvalidParameterError, match="json_schema and grammar"):
        SamplingParams(json_schema={"type": "object"}, grammar='start: "a"')


@pytest.mark.parametrize("field, value", [
    ("choice", []), ("choice", "yes"), ("choice", ["a", ""]), ("choice", ["a", 3]),
    ("regex", ""), ("regex", 5), ("grammar", ""), ("json_schema", "{not json"),
    ("json_schema", "[1, 2]"), ("json_schema", {"x": float("nan")}),
])
def test_malformed_constraint_values_name_the_field(field: str, value: object) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(**{field: value})
    assert info.value.param == field


def test_constraint_is_normalized_and_reported() -> None:
    sp = SamplingParams(choice=["yes", "no"], json_schema=None)
    assert sp.choice == ("yes", "no") and sp.constraint == ("choice", ("yes", "no"))
    sp = SamplingParams(json_schema={"b": 1, "type": "object"})
    assert sp.constraint == ("json_schema", '{"b": 1, "type": "object"}')
    assert SamplingParams().constraint is None
    assert SamplingParams(regex="a+").to_dict()["regex"] == "a+"


def test_unpack_bitmask_matches_bit_arithmetic() -> None:
    gen = torch.Generator().manual_seed(0)
    words = torch.randint(-2**31, 2**31 - 1, (3, 4), generator=gen, dtype=torch.int64)
    bitmask = words.to(torch.int32)
    for vocab in (100, 128, 140):
        got = unpack_bitmask(bitmask, vocab)
        for b in range(3):
            for t in range(vocab):
                want = t < 128 and (int(words[b, t // 32]) >> (t % 32)) & 1 == 1
                assert bool(got[b, t]) == want


# -- with llguidance -----------------------------------------------------------------------------

llguidance = pytest.importorskip("llguidance", reason=INSTALL_HINT)


@pytest.mark.parametrize("field, value", [
    ("regex", "("), ("regex", "[a-"), ("grammar", "start: foo"), ("grammar", "start: ("),
])
def test_invalid_syntax_is_rejected_at_construction(field: str, value: str) -> None:
    with pytest.raises(InvalidParameterError) as info:
        SamplingParams(**{field: value})
    assert info.value.param == field


@pytest.fixture(scope="module")
def compiler(stories_path):
    from transformers import AutoTokenizer

    from metagen.decoding.grammar import GrammarCompiler
    tok = AutoTokenizer.from_pretrained(str(stories_path))
    return GrammarCompiler(tok, 512, (2,), cache_size=2), tok


@pytest.mark.parametrize("field, value", [
    ("regex", r"[^\s\S]"),  # a language without any string
    ("json_schema", '{"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}'),
])
def test_empty_language_and_ref_loop_fail_to_compile(compiler, field, value) -> None:
    """The compiler's own check (the ``$ref`` loop is refused earlier too, when the params are
    made: its language is empty)."""
    comp, _ = compiler
    with pytest.raises(InvalidParameterError) as info:
        comp.matcher((field, value))
    assert info.value.param == field


def test_compiled_grammars_are_cached_in_an_lru(compiler) -> None:
    comp, _ = compiler
    a, b, c = (SamplingParams(regex=r).constraint for r in ("a+", "b+", "c+"))
    first = comp.template(a)
    assert comp.template(a) is first
    comp.template(b)
    comp.template(a)  # a most recent: b goes when c arrives
    comp.template(c)
    assert comp.cached == 2 and comp.template(a) is first


def _allowed(matcher, vocab: int = 512) -> set[int]:
    bitmask = torch.zeros((1, (vocab + 31) // 32), dtype=torch.int32)
    matcher.fill(bitmask, 0)
    return set(torch.nonzero(unpack_bitmask(bitmask, vocab)[0]).flatten().tolist())


def _reference_allowed(comp, constraint, tokens: list[int]) -> set[int]:
    import llguidance.torch as lt
    m = llguidance.LLMatcher(comp.tokenizer, _grammar(constraint), log_level=0)
    assert m.consume_tokens(tokens)
    bm = lt.allocate_token_bitmask(1, 512)
    lt.fill_next_token_bitmask(m, bm, 0)
    return set(torch.nonzero(unpack_bitmask(bm, 512)[0]).flatten().tolist())


def _grammar(constraint) -> str:
    from metagen.constraints import grammar_text
    return grammar_text(*constraint)


def test_sync_rolls_back_and_forks_like_a_fresh_matcher(compiler) -> None:
    """After any sequence of syncs (forward, back to a common prefix, to another branch) and a
    fork, the mask equals that of a fresh llguidance matcher fed the same tokens."""
    comp, _ = compiler
    constraint = SamplingParams(regex=r"(cat|dog) [0-9]{2,4}").constraint
    cat = comp.tokenizer.tokenize_str("cat 1234")  # raw text, no sentencepiece space prefix
    dog = comp.tokenizer.tokenize_str("dog 56")
    assert len(cat) > 2 and len(dog) > 1
    m = comp.matcher(constraint)
    for ids in (cat, cat[:2], dog, dog[:1], cat, cat[:-1]):
        assert m.sync(list(ids))
        assert _allowed(m) == _reference_allowed(comp, constraint, list(ids))
    child = m.copy()
    assert child.sync(list(cat)) and m.sync(list(dog))
    assert _allowed(child) == _reference_allowed(comp, constraint, list(cat))
    assert _allowed(m) == _reference_allowed(comp, constraint, list(dog))
    assert child.accepting and m.accepting


def test_refused_token_is_not_consumed_and_row_allows_only_eos(compiler) -> None:
    from metagen.decoding.constraint_mask import constraint_allowed
    from metagen.decoding.state import SequenceState
    comp, tok = compiler
    params = SamplingParams(regex="[0-9]+")
    digits = comp.tokenizer.tokenize_str("12")
    letters = comp.tokenizer.tokenize_str("ab")
    m = comp.matcher(params.constraint)
    assert not m.sync(list(digits) + list(letters))
    ok = SequenceState(params, [1], list(digits), eos_token_ids=(2,), constraint=m.copy())
    bad = SequenceState(params, [1], list(digits) + list(letters), eos_token_ids=(2,),
                        constraint=m.copy())
    free = SequenceState(SamplingParams(), [1], [], eos_token_ids=(2,))
    allowed = constraint_allowed([ok, bad, free], 512)
    digit_ids = {t for t in range(3, 512) if re.fullmatch(r"[0-9]+", tok.convert_ids_to_tokens(t))}
    assert digit_ids and digit_ids <= set(torch.nonzero(allowed[0]).flatten().tolist())
    assert bool(allowed[0, 2])  # "12" is a complete match: EOS allowed
    assert torch.nonzero(allowed[1]).flatten().tolist() == [2]
    assert bool(allowed[2].all())
