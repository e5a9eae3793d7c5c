"""MockGenerator: scripted outputs, SamplingParams applied to them, call records, faults, usage."""

from __future__ import annotations

import pytest

from metagen.errors import CapabilityError, InvalidParameterError, InvalidPromptError
from metagen.generators.base import Capabilities, Generator, ScoringGenerator, require
from metagen.generators.mock import MockGenerator, apply_stop
from metagen.types import Completion, SamplingParams


def test_mock_implements_protocols() -> None:
    gen = MockGenerator(["a"], scorer=lambda p, c: 0.0)
    assert isinstance(gen, Generator)
    assert isinstance(gen, ScoringGenerator)
    require(gen, "prompt_scoring")
    with pytest.raises(CapabilityError):
        require(MockGenerator(["a"]), "prompt_scoring")


def test_callable_script_is_pure_in_prompt_and_sample_index() -> None:
    gen = MockGenerator(lambda p, j: f"{p} #{j}")
    params = SamplingParams(n=3, temperature=1.0)
    out = gen.generate(["x", "y"], params)
    assert [[c.text for c in row] for row in out] == [["x #0", "x #1", "x #2"],
                                                      ["y #0", "y #1", "y #2"]]
    assert gen.generate(["y"], params)[0][1].text == "y #1"
    assert gen.num_calls == 2
    assert gen.calls[0].prompts == ["x", "y"] and gen.calls[0].params is params


def test_mapping_script_walks_a_cursor_per_prompt() -> None:
    gen = MockGenerator({"p": ["a", "b", "c"], "q": ["z"]})
    two = SamplingParams(n=2, temperature=1.0)
    first = gen.generate(["p", "q"], two)
    second = gen.generate(["p"], two)
    assert [c.text for c in first[0]] == ["a", "b"]
    assert [c.text for c in first[1]] == ["z", "z"]
    assert [c.text for c in second[0]] == ["c", "a"]  # wraps around
    with pytest.raises(InvalidPromptError):
        gen.generate(["unknown"], two)


def test_stop_strings_and_max_tokens_are_applied() -> None:
    gen = MockGenerator(["step one\nstep two\n#### 4"])
    c = gen.generate(["p"], SamplingParams(stop=("\n",)))[0][0]
    assert (c.text, c.finish_reason, c.stop_reason) == ("step one", "stop", "\n")
    assert len(c.token_ids) == 2
    c = gen.generate(["p"], SamplingParams(max_tokens=3))[0][0]
    assert (c.text, c.finish_reason, c.stop_reason) == ("step one\nstep", "length", None)
    c = gen.generate(["p"], SamplingParams(max_tokens=100))[0][0]
    assert (c.text, c.finish_reason) == ("step one\nstep two\n#### 4", "stop")


def test_apply_stop_earliest_then_longest() -> None:
    assert apply_stop("abcdef", ["de", "bc"]) == ("a", "bc")
    assert apply_stop("abcdef", ["b", "bcd"]) == ("a", "bcd")
    assert apply_stop("abc", ["x"]) == ("abc", None)


def test_scripted_completion_is_returned_as_is() -> None:
    comp = Completion(text="42", token_ids=(7,), logprobs=(-0.5,), cumulative_logprob=-0.5)
    gen = MockGenerator([comp])
    assert gen.generate(["p"], SamplingParams(stop=("4",)))[0][0] is comp


def test_scripted_fault_reason_fails_only_that_sample() -> None:
    gen = MockGenerator(lambda p, j: f"ok {j}",
                        fault=lambda p, j, call: "timeout" if j in (1, 3) else None)
    row = gen.generate(["p"], SamplingParams(n=4, temperature=1.0))[0]
    assert [c.finish_reason for c in row] == ["stop", "error", "stop", "error"]
    assert row[1].stop_reason == "timeout" and row[1].text == ""
    assert row[2].text == "ok 2"


def test_scripted_fault_exception_fails_the_call_without_usage() -> None:
    gen = MockGenerator(["a"], fault=lambda p, j, call: ConnectionError("down") if call == 0
                        else None)
    with pytest.raises(ConnectionError):
        gen.generate(["p"], SamplingParams())
    assert gen.usage.calls == 0 and gen.num_calls == 1
    assert gen.generate(["p"], SamplingParams())[0][0].text == "a"
    assert gen.usage.calls == 1


def test_usage_counts_words_per_sample() -> None:
    gen = MockGenerator(["one two three"], flops_per_token=2.0)
    gen.generate(["a b", "c"], SamplingParams(n=2, temperature=0.7))
    u = gen.usage
    assert u.prompt_tokens == 2 * 2 + 1 * 2
    assert u.generated_tokens == 4 * 3
    assert u.calls == 1
    assert u.generator_flops == 2.0 * (6 + 12)


def test_chat_prompts_render_as_role_lines() -> None:
    gen = MockGenerator(lambda p, j: p.upper())
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert gen.generate([msgs], SamplingParams())[0][0].text == "SYSTEM: BE BRIEF\nUSER: HI"


def test_score_records_and_counts() -> None:
    gen = MockGenerator(["a"], scorer=lambda p, c: -float(len(c)))
    assert gen.score(["p", "q"], [["ab", "c"], ["xyz"]]) == [[-2.0, -1.0], [-3.0]]
    assert gen.usage.scorer_calls == 1 and gen.num_calls == 0
    with pytest.raises(InvalidParameterError):
        gen.score(["p"], [["a"], ["b"]])
    with pytest.raises(CapabilityError):
        MockGenerator(["a"]).score(["p"], [["a"]])


def test_bad_inputs_raise_typed_errors() -> None:
    gen = MockGenerator(["a"], capabilities=Capabilities(logprobs=True))
    assert gen.capabilities.logprobs
    with pytest.raises(InvalidPromptError):
        gen.generate([], SamplingParams())
    with pytest.raises(InvalidPromptError):
        gen.generate("just a string", SamplingParams())  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="params"):
        gen.generate(["p"], {"n": 2})  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="script"):
        MockGenerator([])
