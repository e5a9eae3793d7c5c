"""An output constraint on OpenAIGenerator: sent as each dialect's structured-output fields, or
refused naming the field before any request when the dialect has none."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("httpx")

from metagen.errors import CapabilityError  # noqa: E402
from metagen.generators.openai_structured import structured_fields  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402

from .test_openai import make  # noqa: E402,F401  (the scripted-server fixture)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
P = SamplingParams(temperature=0.0, max_tokens=8)


@pytest.mark.parametrize("dialect, params, want", [
    ("vllm", P.with_(json_schema=SCHEMA), {"structured_outputs": {"json": SCHEMA}}),
    ("vllm", P.with_(regex="[0-9]+"), {"structured_outputs": {"regex": "[0-9]+"}}),
    ("vllm", P.with_(choice=["yes", "no"]), {"structured_outputs": {"choice": ["yes", "no"]}}),
    ("vllm", P.with_(grammar='start: "a"'), {"structured_outputs": {"grammar": 'start: "a"'}}),
    ("openai", P.with_(json_schema=SCHEMA), {"response_format": {
        "type": "json_schema", "json_schema": {"name": "output", "schema": SCHEMA,
                                               "strict": True}}}),
    ("sglang", P.with_(regex="[0-9]+"), {"regex": "[0-9]+"}),
    ("llamacpp", P.with_(json_schema=SCHEMA), {"json_schema": SCHEMA}),
])
def test_scripted_server_receives_the_dialects_structured_fields(make, dialect, params, want):
    server, gen = make(dialect=dialect)
    gen.generate([[{"role": "user", "content": "q"}]], params)
    body = server.posts[0].body
    for key, value in want.items():
        got = body[key]
        if key == "json_schema" and isinstance(got, str):
            got = json.loads(got)
        assert got == value
    assert not {"regex", "json_schema", "grammar", "choice"} & set(body) - set(want)


def test_sglang_choice_is_an_escaped_alternation() -> None:
    fields = structured_fields(SamplingParams(choice=["a.b", "c|d", "(e)"]), "sglang")
    pattern = fields["regex"]
    assert all(re.fullmatch(pattern, c) for c in ("a.b", "c|d", "(e)"))
    assert not any(re.fullmatch(pattern, c) for c in ("axb", "c", "e"))
    sch = structured_fields(SamplingParams(json_schema=SCHEMA), "sglang")["json_schema"]
    assert json.loads(sch) == SCHEMA


@pytest.mark.parametrize("dialect, params, name", [
    ("openai", P.with_(regex="a+"), "regex"),
    ("openai", P.with_(choice=["a"]), "choice"),
    ("sglang", P.with_(grammar='start: "a"'), "grammar"),
    ("llamacpp", P.with_(regex="a+"), "regex"),
    ("llamacpp-python", P.with_(json_schema=SCHEMA), "json_schema"),
])
def test_scripted_unsupported_constraint_is_refused_before_any_request(make, dialect, params,
                                                                      name):
    server, gen = make(dialect=dialect)
    with pytest.raises(CapabilityError, match=name):
        gen.generate(["q"], params)
    assert server.posts == []
