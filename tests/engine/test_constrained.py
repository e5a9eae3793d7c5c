"""Constrained decoding in the engine: every output is in the constraint's language, per-sequence
matchers survive n > 1 forks and speculative rollback, bad constraints fail at request time."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import metagen
from metagen.engine.build import build_engine
from metagen.constraints import INSTALL_HINT
from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models.loader import load_model
from metagen.engine.proposers import NgramProposer
from metagen.engine.speculative_decoding import Speculator
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

pytest.importorskip("llguidance", reason=INSTALL_HINT)

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pet": {"enum": ["cat", "dog", "none"]},
    },
    "required": ["name", "age", "pet"],
    "additionalProperties": False,
}


def check_document(text: str) -> None:
    """``text`` parses as JSON and satisfies SCHEMA (jsonschema when installed, else by hand)."""
    doc = json.loads(text)
    try:
        import jsonschema
    except ImportError:
        assert set(doc) == {"name", "age", "pet"}
        assert isinstance(doc["name"], str) and 1 <= len(doc["name"]) <= 8
        assert isinstance(doc["age"], int) and 0 <= doc["age"] <= 120
        assert doc["pet"] in ("cat", "dog", "none")
    else:
        jsonschema.validate(doc, SCHEMA)


@pytest.fixture(scope="module")
def policy_gen():
    from metagen.generators.local import LocalGenerator
    gen = LocalGenerator(LLMEngine.from_pretrained(POLICY, device="cpu"))
    yield gen
    gen.close()


def test_json_schema_best_of_8_returns_8_valid_documents(policy_gen) -> None:
    from metagen.strategies.best_of_n import best_of_n
    params = SamplingParams(temperature=1.0, max_tokens=96, seed=7, json_schema=SCHEMA)
    result = best_of_n(policy_gen, "Q: describe a person as JSON.\nA: ", n=8,
                       reward=lambda p, c: -len(c), params=params)
    assert len(result.candidates) == 8
    for c in result.candidates:
        assert c.finish_reason == "stop"
        check_document(c.text)
    assert len({c.text for c in result.candidates}) > 1  # sampled, not one forced string
    check_document(result.best.text)


@pytest.fixture(scope="module")
def stories(stories_engine_factory):
    return stories_engine_factory(block_size=4)


def _texts(engine: LLMEngine, prompt: str, params: SamplingParams) -> list[str]:
    ids = engine.tokenizer(prompt)["input_ids"]
    out = engine.generate([ids], params)[0]
    assert all(c.finish_reason == "stop" for c in out.outputs), out.outputs
    return [c.text for c in out.outputs]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_regex_and_choice_outputs_match(stories, seed: int) -> None:
    pattern = r"[A-Z][a-z]{1,6} (is|was) [0-9]{1,3}\."
    for text in _texts(stories, "Once upon a time",
                       SamplingParams(n=4, temperature=1.2, seed=seed, max_tokens=40,
                                      regex=pattern)):
        assert re.fullmatch(pattern, text), text
    choices = ["the red ball", "a tiny dog", "Lily"]
    got = _texts(stories, "Tom saw", SamplingParams(n=6, temperature=1.5, seed=seed,
                                                    max_tokens=20, choice=choices))
    assert set(got) <= set(choices)


def test_lark_grammar_outputs_parse(stories) -> None:
    grammar = ('start: item | item ", " item | item ", " item ", " item\n'
               'item: "cat" | "dog" | NUMBER\nNUMBER: /[0-9]{1,2}/')
    item = r"(cat|dog|[0-9]{1,2})"
    for text in _texts(stories, "A list:", SamplingParams(n=4, temperature=1.0, seed=5,
                                                         max_tokens=30, grammar=grammar)):
        assert re.fullmatch(f"{item}(, {item}){{0,2}}", text), text


def test_eos_waits_until_the_language_accepts(stories) -> None:
    """Greedy stories260K ends early when free; under ``[a-z]{12}`` it must write 12 letters."""
    out = _texts(stories, "Once upon a time", SamplingParams(temperature=0.0, max_tokens=30,
                                                             regex="[a-z ]{12}"))
    assert len(out[0]) == 12 and re.fullmatch("[a-z ]{12}", out[0])


def test_too_few_tokens_for_a_document_end_at_length(stories) -> None:
    """max_tokens too small to finish a JSON document: a prefix of one, finish_reason
    "length", no error; and recursive but terminating grammars are accepted and run."""
    [out] = stories.generate([[1, 403, 407]], SamplingParams(
        temperature=0.0, max_tokens=3, json_schema=SCHEMA))
    c = out.outputs[0]
    assert c.finish_reason == "length" and len(c.token_ids) == 3 and c.text.startswith("{")
    tree = {"type": "object", "required": ["kids"], "properties": {
        "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}}
    for params in (SamplingParams(temperature=0.0, max_tokens=40, json_schema=tree),
                   SamplingParams(temperature=0.0, max_tokens=40,
                                  grammar='start: "(" start ")" | "x"')):
        [out] = stories.generate([[1, 403, 407]], params)
        assert out.outputs[0].finish_reason in ("stop", "length")


def test_n_samples_keep_their_own_matchers(stories) -> None:
    """n = 8 forks after one prefill: each sample is in the language on its own, and the
    samples differ (a shared matcher would corrupt or align them)."""
    params = SamplingParams(n=8, temperature=1.0, seed=11, max_tokens=40,
                            regex=r"(Tom|Lily) (ran|sat|ate)( and (ran|sat|ate)){0,3}\.")
    texts = _texts(stories, "Once upon a time", params)
    assert len(texts) == 8 and len(set(texts)) > 2
    for t in texts:
        assert re.fullmatch(params.regex or "", t), t


@pytest.fixture(scope="module")
def spec_models(stories_path, tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    bad = tmp_path_factory.mktemp("bad_draft")
    LlamaForCausalLM(cfg).save_pretrained(bad)
    return load_model(stories_path), load_model(bad)


@pytest.mark.parametrize("proposer_kind", ["self", "bad", "ngram", "self tree"])
def test_speculative_constrained_greedy_equals_plain_constrained_greedy(
        stories, spec_models, proposer_kind: str) -> None:
    """Drafts are proposed without the constraint, so many are refused and rolled back; the
    accepted output is still exactly constrained greedy decoding. A draft tree's leaves (``self
    tree``: the draft's next best beside each of its first two drafts) have their own paths,
    each verified position's matcher synced (rolled back) to its node's path."""
    target, bad = spec_models
    tok = stories.tokenizer

    def make(proposer=None):
        return build_engine(target, tok, EngineConfig(block_size=8, num_blocks=256, device="cpu"),
                         speculator=None if proposer is None else Speculator(proposer, 4))

    proposer = {"self": lambda: DraftModelProposer(make()),
                "self tree": lambda: DraftModelProposer(make(), tree=(2, 1)),
                "bad": lambda: DraftModelProposer(build_engine(bad, tok, EngineConfig(
                    block_size=8, num_blocks=256, device="cpu"))),
                "ngram": lambda: NgramProposer(3)}[proposer_kind]()
    spec, plain = make(proposer), make()
    prompts = [tok(p)["input_ids"] for p in ("Once upon a time", "Tom and Lily went to the")]
    for params in (SamplingParams(temperature=0.0, max_tokens=48, json_schema=SCHEMA),
                   SamplingParams(temperature=0.0, max_tokens=30,
                                  regex=r"([a-z]+ ){2,5}(park|tree)\.")):
        got = [o.outputs[0].token_ids for o in spec.generate(prompts, params)]
        want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
        assert got == want
    stats = spec.speculator.stats
    assert stats.accepted > 0 or proposer_kind == "bad"
    assert stats.proposed > stats.accepted  # some drafts were refused and rolled back
    if proposer_kind == "self tree":  # where the grammar refuses a draft, a leaf can carry on
        assert stats.leaves_accepted > 0


@pytest.mark.parametrize("field, value", [
    ("regex", "("), ("regex", r"[^\s\S]"), ("grammar", "start: foo"),
    ("json_schema", {"$ref": "#/definitions/a", "definitions": {"a": {"$ref": "#/definitions/a"}}}),
    ("grammar", 'start: "a" start'),  # empty languages: no derivation ever finishes
    ("grammar", 'start: "a" /[^\\s\\S]/'),  # a terminal matching nothing: a dead end
    ("grammar", 'start: "a" | "b" /x[^\\s\\S]/i'),  # ... even in one branch only
    ("json_schema", {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}),
])
def test_invalid_constraint_fails_at_request_time(stories, field: str, value) -> None:
    with pytest.raises(InvalidParameterError) as info:
        stories.add_request([1, 2, 3], SamplingParams(**{field: value}))
    assert info.value.param == field
    assert not stories.has_unfinished()


def test_constraint_without_tokenizer_is_refused(spec_models) -> None:
    target, _ = spec_models
    eng = build_engine(target, None, EngineConfig(block_size=8, num_blocks=64, device="cpu"))
    with pytest.raises(InvalidParameterError, match="tokenizer") as info:
        eng.add_request([1, 2, 3], SamplingParams(regex="a+"))
    assert info.value.param == "regex"


def test_beam_search_keeps_a_matcher_per_beam(stories) -> None:
    """Every hypothesis of a constrained beam search is in the language (beams fork and extend
    their own matchers); one beam is constrained greedy decoding."""
    from metagen.beam_params import BeamSearchParams
    ids = stories.tokenizer("Once upon a time")["input_ids"]

    def beam_search(engine, prompts, params):
        return [engine.run_until_done([engine.add_request(p, params)])[0].outputs
                for p in prompts]

    pattern = r"(Tom|Lily) (ran|sat|ate)( and (ran|sat|ate)){0,3}\."
    out = beam_search(stories, [ids], BeamSearchParams(num_beams=4, num_return_sequences=4,
                                                       max_tokens=30, regex=pattern))[0]
    texts = [c.text for c in out]
    assert len({c.token_ids for c in out}) == 4  # distinct beams (texts may tokenize alike)
    assert all(re.fullmatch(pattern, t) for t in texts), texts
    one = beam_search(stories, [ids], BeamSearchParams(num_beams=1, max_tokens=30,
                                                       regex=pattern))[0][0]
    greedy = stories.generate([ids], SamplingParams(temperature=0.0, max_tokens=30,
                                                    regex=pattern))[0].outputs[0]
    assert one.token_ids == greedy.token_ids


def test_beam_search_invalid_constraint_fails_at_request_time(stories) -> None:
    from metagen.beam_params import BeamSearchParams
    with pytest.raises(InvalidParameterError) as info:
        BeamSearchParams(num_beams=2, regex="(")
    assert info.value.param == "regex"
    with pytest.raises(InvalidParameterError) as info:
        stories.add_request([1, 2, 3], BeamSearchParams(num_beams=2, regex=r"[^\s\S]"))
    assert info.value.param == "regex"
