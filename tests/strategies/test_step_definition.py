"""StepDefinition: closing one-step completions, final detection, splitting, params."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.strategies.steps import StepDefinition
from metagen.types import Completion, SamplingParams


def test_close_puts_the_stop_string_back_and_is_not_final():
    steps = StepDefinition()
    c = Completion(text="3 + 4 = 7", finish_reason="stop", stop_reason="\n")
    assert steps.close(c) == ("3 + 4 = 7\n", False)


def test_close_eos_length_and_foreign_stops_end_the_solution():
    steps = StepDefinition()
    assert steps.close(Completion(text="x = 1", finish_reason="stop")) == ("x = 1", True)
    assert steps.close(Completion(text="x = 1", finish_reason="length")) == ("x = 1", True)
    c = Completion(text="x", finish_reason="stop", stop_reason="\n\n")
    assert steps.close(c) == ("x", True)  # a caller's own stop string ends the solution
    c = Completion(text="x", finish_reason="stop", stop_reason=2)  # a stop token id
    assert steps.close(c) == ("x", True)


def test_final_marker_and_predicate():
    steps = StepDefinition()
    c = Completion(text="#### 42", finish_reason="stop", stop_reason="\n")
    assert steps.close(c) == ("#### 42\n", True)
    custom = StepDefinition(final_marker=None, is_final=lambda s: "DONE" in s)
    assert custom.close(Completion(text="#### 1", finish_reason="stop", stop_reason="\n")) \
        == ("#### 1\n", False)
    assert custom.close(Completion(text="DONE", finish_reason="stop", stop_reason="\n"))[1]


def test_boundary_callable_cuts_the_first_step():
    steps = StepDefinition(stop=(), boundary=lambda t: t.find(";") + 1 or None)
    c = Completion(text="a=1; b=2; c", finish_reason="length")
    assert steps.close(c) == ("a=1;", False)
    assert steps.close(Completion(text="no end", finish_reason="stop")) == ("no end", True)
    assert steps.split("a=1; b=2; c") == ["a=1;", " b=2;", " c"]


def test_split_keeps_stops_and_handles_tails():
    steps = StepDefinition(stop=("\n", ". "))
    assert steps.split("a\nb. c\nd") == ["a\n", "b. ", "c\n", "d"]
    assert steps.split("") == []


def test_params_merge_stops_and_cap_tokens():
    steps = StepDefinition(max_step_tokens=16)
    p = steps.params(SamplingParams(temperature=0.7, stop=("\n\n",), max_tokens=500), n=3)
    assert p.n == 3 and p.max_tokens == 16 and p.stop == ("\n\n", "\n")
    assert steps.params(SamplingParams(), n=1, max_tokens=5).max_tokens == 5


@pytest.mark.parametrize("kwargs,param", [
    ({"stop": ("",)}, "stop"), ({"stop": ()}, "stop"), ({"max_step_tokens": 0}, "max_step_tokens"),
    ({"max_step_tokens": True}, "max_step_tokens"), ({"final_marker": ""}, "final_marker"),
    ({"boundary": 3}, "boundary"), ({"is_final": "x"}, "is_final")])
def test_bad_definitions_name_the_parameter(kwargs, param):
    with pytest.raises(InvalidParameterError) as err:
        StepDefinition(**kwargs)
    assert err.value.param == param
