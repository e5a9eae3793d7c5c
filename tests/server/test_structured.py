"""Structured output through the server, driven by the official ``openai`` SDK: vLLM's
``structured_outputs`` and ``guided_*`` fields and OpenAI's ``response_format`` constrain the
samples exactly as the library's ``SamplingParams`` constraint fields do (the same text for the
same seed), and a bad constraint is a 400 naming the field as the client spelt it (V19)."""

from __future__ import annotations

import json
import re

import openai
import pytest

from metagen.constraints import INSTALL_HINT
from metagen.types import SamplingParams
from tests.server.conftest import API_KEY, MODEL

pytest.importorskip("llguidance", reason=INSTALL_HINT)

PROMPT = "Once upon a time"
MESSAGES = [{"role": "user", "content": "Once upon a time"}]
SCHEMA = {"type": "object",
          "properties": {"pet": {"enum": ["cat", "dog"]}, "happy": {"type": "boolean"}},
          "required": ["pet", "happy"], "additionalProperties": False}


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


def _valid(text: str) -> bool:
    doc = json.loads(text)
    return set(doc) == {"pet", "happy"} and doc["pet"] in ("cat", "dog") \
        and isinstance(doc["happy"], bool)


def test_structured_outputs_json_samples_are_documents_equal_to_the_library(client, ref_gen):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=48, n=4,
                                    temperature=1.0, seed=5,
                                    extra_body={"structured_outputs": {"json": SCHEMA}})
    [want] = ref_gen.generate([PROMPT], SamplingParams(n=4, temperature=1.0, seed=5,
                                                       max_tokens=48, json_schema=SCHEMA))
    texts = [c.text for c in got.choices]
    assert texts == [w.text for w in want]
    assert all(_valid(t) for t in texts)


def test_response_format_json_schema_on_chat(client, ref_gen):
    got = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=48, temperature=1.0, seed=9,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}})
    [[want]] = ref_gen.generate([MESSAGES], SamplingParams(temperature=1.0, seed=9,
                                                           max_tokens=48, json_schema=SCHEMA))
    assert got.choices[0].message.content == want.text and _valid(want.text)
    obj = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=32,
                                         temperature=1.0, seed=9,
                                         response_format={"type": "json_object"})
    text = obj.choices[0].message.content
    if obj.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:  # cut at max_tokens: still a prefix of an object
        assert text.lstrip().startswith("{")


@pytest.mark.parametrize("extra", [{"guided_regex": "[0-9]{3}"},
                                   {"structured_outputs": {"regex": "[0-9]{3}"}}])
def test_regex_constrains_every_sample(client, extra):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=3,
                                    temperature=1.0, seed=1, extra_body=extra)
    assert all(re.fullmatch(r"[0-9]{3}", c.text) for c in got.choices)


@pytest.mark.parametrize("extra", [{"guided_choice": ["red", "green", "blue"]},
                                   {"structured_outputs": {"choice": ["red", "green", "blue"]}}])
def test_choice_constrains_every_sample(client, extra):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, n=4,
                                    temperature=1.0, seed=3, extra_body=extra)
    assert all(c.text in ("red", "green", "blue") for c in got.choices)


@pytest.mark.parametrize("extra, param", [
    ({"structured_outputs": {"regex": "("}}, "structured_outputs.regex"),
    ({"guided_regex": "("}, "guided_regex"),
    ({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}},
     "guided_json"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"pattern": "a"}}, "structured_outputs.pattern"),
    ({"guided_regex": "a", "guided_choice": ["b"]}, "guided_regex"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    # empty languages: a character class matching nothing, derivations that never finish
    ({"guided_regex": r"[^\s\S]"}, "guided_regex"),
    ({"structured_outputs": {"grammar": 'start: "a" start'}}, "structured_outputs.grammar"),
    ({"guided_grammar": 'start: x\nx: "b" x'}, "guided_grammar"),
    ({"guided_grammar": 'start: "a" /[^\\s\\S]/'}, "guided_grammar"),  # a dead-end terminal
    ({"guided_json": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}},
     "guided_json"),
    ({"response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "array", "items": {"$ref": "#"}, "minItems": 1}}}},
     "response_format.json_schema.schema"),
])
def test_a_bad_constraint_is_a_400_naming_the_field(client, extra, param):
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, extra_body=extra)
    assert bad.value.status_code == 400 and bad.value.param == param
    ok = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2)  # still serving
    assert ok.choices[0].finish_reason in ("stop", "length")
