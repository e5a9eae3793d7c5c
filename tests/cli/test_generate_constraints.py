"""``metagen generate``'s output constraints (``--regex``, ``--json-schema``, ``--grammar``,
``--choice``), ``--token-healing`` and stochastic beam search (``--num-beams --stochastic``):
each run equals the library call with the same ``SamplingParams`` / ``BeamSearchGenerator`` and
seed on stories260K, its samples are in the language, a bad value is one line naming the field
(exit status 2, before loading), and over ``--base-url`` (a metagen server on loopback) a
constraint gives what it gives locally."""

from __future__ import annotations

import json
import re

import pytest

from metagen.cli import main
from metagen.constraints import INSTALL_HINT
from metagen.generators.beam import BeamSearchGenerator
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams

pytest.importorskip("llguidance", reason=INSTALL_HINT)

PROMPT = "Once upon a time"
SCHEMA = {"type": "object",
          "properties": {"pet": {"enum": ["cat", "dog"]}, "happy": {"type": "boolean"}},
          "required": ["pet", "happy"], "additionalProperties": False}
GRAMMAR = 'start: "The " animal " was " mood "."\nanimal: "cat" | "dog" | "bird"\n' \
          'mood: "happy" | "sad"\n'


@pytest.fixture(scope="module")
def gen(stories_path):
    generator = LocalGenerator.from_pretrained(stories_path)
    yield generator
    generator.close()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, model, prompt: str, *argv: str) -> dict:
    code, out, err = run(capsys, "generate", str(model), prompt, "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def texts(doc: dict) -> list[str]:
    return [c["text"] for c in doc["completions"]]


@pytest.mark.parametrize("flags, fields, language", [
    (["--regex", "[a-z]+( [a-z]+){2}\\."], {"regex": "[a-z]+( [a-z]+){2}\\."},
     re.compile(r"[a-z]+( [a-z]+){2}\.")),
    # the schema as the text given (a dict would be re-serialized with sorted keys, and the
    # order of the properties is the order llguidance writes them in)
    (["--json-schema", json.dumps(SCHEMA)], {"json_schema": json.dumps(SCHEMA)}, None),
    (["--json-schema", "FILE:schema.json"], {"json_schema": json.dumps(SCHEMA, indent=2)},
     None),
    (["--grammar", GRAMMAR], {"grammar": GRAMMAR},
     re.compile(r"The (cat|dog|bird) was (happy|sad)\.")),
    (["--grammar", "FILE:story.lark"], {"grammar": GRAMMAR},
     re.compile(r"The (cat|dog|bird) was (happy|sad)\.")),
    (["--choice", "red", "--choice", "green", "--choice", "blue"],
     {"choice": ("red", "green", "blue")}, re.compile("red|green|blue")),
])
def test_constraint_flag_equals_the_library_and_stays_in_the_language(
        capsys, tmp_path, stories_path, gen, flags, fields, language) -> None:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA, indent=2), encoding="utf-8")
    (tmp_path / "story.lark").write_text(GRAMMAR, encoding="utf-8")
    flags = [str(tmp_path / f[5:]) if f.startswith("FILE:") else f for f in flags]
    doc = cli_json(capsys, stories_path, PROMPT, "--n", "3", "--seed", "4", "--max-tokens",
                   "48", *flags)
    [want] = gen.generate([PROMPT], SamplingParams(n=3, seed=4, max_tokens=48, **fields))
    assert texts(doc) == [c.text for c in want]
    assert [c["token_ids"] for c in doc["completions"]] == [list(c.token_ids) for c in want]
    for comp in doc["completions"]:
        if comp["finish_reason"] != "stop":
            continue
        if language is None:
            document = json.loads(comp["text"])
            assert set(document) == {"pet", "happy"} and document["pet"] in ("cat", "dog")
        else:
            assert language.fullmatch(comp["text"]), comp["text"]
    assert any(c["finish_reason"] == "stop" for c in doc["completions"])


@pytest.mark.parametrize("flag, value", [("--token-healing", None), ("--token-healing", "3"),
                                         ("--token-healing=2", None)])
def test_token_healing_equals_the_library(capsys, stories_path, gen, flag, value) -> None:
    prompt = "Once upon a ti"  # ends mid-word: healing re-produces "ti" and goes on
    argv = [flag] if value is None else [flag, value]
    doc = cli_json(capsys, stories_path, prompt, "--seed", "2", "--max-tokens", "12", *argv)
    heal = int(value) if value else (2 if "=" in flag else True)
    [[want]] = gen.generate([prompt], SamplingParams(seed=2, max_tokens=12, token_healing=heal))
    assert doc["params"]["token_healing"] == heal
    assert doc["completions"][0]["text"] == want.text
    assert doc["completions"][0]["token_ids"] == list(want.token_ids)


def test_stochastic_beam_equals_the_library(capsys, stories_path, gen) -> None:
    doc = cli_json(capsys, stories_path, PROMPT, "--num-beams", "4", "--stochastic", "--n", "3",
                   "--seed", "11", "--max-tokens", "20")
    want = BeamSearchGenerator(gen, 4, stochastic=True).generate(
        [PROMPT], SamplingParams(n=3, seed=11, max_tokens=20))[0]
    assert [c["token_ids"] for c in doc["completions"]] == [list(c.token_ids) for c in want]
    assert [c["cumulative_logprob"] for c in doc["completions"]] == \
        [c.cumulative_logprob for c in want]
    assert doc["beam"]["stochastic"] is True and doc["beam"]["seed"] == 11
    other = cli_json(capsys, stories_path, PROMPT, "--num-beams", "4", "--stochastic", "--n",
                     "3", "--seed", "12", "--max-tokens", "20")
    assert texts(other) != texts(doc)  # the seed draws the sample


@pytest.mark.parametrize("argv, field", [
    (["--regex", "("], "regex"),
    (["--json-schema", "{not json"], "json_schema"),
    (["--json-schema", "/nonexistent/schema.json"], "json_schema"),
    (["--grammar", 'start: "a" start'], "grammar"),
    (["--choice", ""], "choice"),
    (["--regex", "a+", "--choice", "b"], "regex and choice"),
    (["--token-healing", "9"], "token_healing"),
    (["--token-healing", "x"], "token_healing"),
    (["--regex", "a+", "--token-healing"], "token_healing"),
    (["--stochastic"], "stochastic"),
    (["--num-beams", "4", "--stochastic", "--num-beam-groups", "2"], "num_beam_groups"),
])
def test_a_bad_value_is_one_line_naming_the_field_before_loading(capsys, argv, field) -> None:
    code, out, err = run(capsys, "generate", "/nonexistent/model", "Hi", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"error: invalid {field}="), err


def test_a_constraint_over_base_url_equals_the_local_run(capsys, stories_path) -> None:
    """OpenAIGenerator forwards the constraint (vLLM's ``structured_outputs``) to a metagen
    server, whose seeded samples are the library's."""
    from tests.server.conftest import MODEL, start_server, stop_server

    served = LocalGenerator.from_pretrained(stories_path)
    running = start_server(served)
    try:
        argv = [PROMPT, "--n", "2", "--seed", "3", "--max-tokens", "12", "--regex",
                "[a-z]+ [a-z]+\\.", "--json"]
        code, out, err = run(capsys, "generate", "--base-url", running.base_url, "--model",
                             MODEL, *argv)
        assert code == 0, err
        local = cli_json(capsys, stories_path, *argv[:-1])
        assert texts(json.loads(out)) == texts(local)
        assert all(re.fullmatch(r"[a-z]+ [a-z]+\.", t) for t in texts(local)
                   if t.endswith("."))
    finally:
        stop_server(running)
        served.close()
