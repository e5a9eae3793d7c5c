"""Self-debug: execution feedback on HumanEval in the default sandbox, through
refine_with_feedback with a scripted generator (a wrong attempt, then the canonical one)."""

from __future__ import annotations

import pytest

from metagen.errors import CodeExecutionNotAllowed, InvalidPromptError
from metagen.sandbox import ENV_ALLOW
from metagen.strategies.refine import refine_with_feedback
from metagen.tasks import load_humaneval
from metagen.tasks.code_feedback import execution_feedback
from metagen.types import SamplingParams
from tests.strategies._scripted_steps import ScriptedStepGenerator

WRONG = "    return False\n"  # has_close_elements: fails check()'s first True case
RAISES = "    raise ValueError('no idea')\n"


@pytest.fixture(scope="module")
def problems(humaneval_path):
    return load_humaneval(humaneval_path, limit=2)


def test_scripted_self_debug_feeds_the_failing_assert_back(problems, sandbox):
    p = problems[0]
    gen = ScriptedStepGenerator(
        lambda prompt, i: p.reference if "Feedback on the attempt above" in prompt else WRONG)
    fb = execution_feedback(problems, allow_code_execution=True, executor=sandbox)
    [r] = refine_with_feedback(gen, [p.prompt], fb, max_attempts=3,
                               params=SamplingParams(max_tokens=4000))
    assert len(gen.calls) == 2  # stopped at the first passing attempt
    second = gen.calls[1][0][0]
    assert second.startswith(p.prompt + WRONG)
    first_feedback = fb(p.prompt, WRONG)
    assert not first_feedback.ok and first_feedback.score == 0.0
    assert "assert candidate(" in first_feedback.message  # the failing assert line
    assert first_feedback.message in second
    assert r.text == p.reference and fb(p.prompt, r.text).ok


def test_exception_and_stderr_are_in_the_message(problems, sandbox):
    p = problems[1]
    fb = execution_feedback(problems, allow_code_execution=True, executor=sandbox)
    out = fb(p.prompt, "    print('debugging here')\n" + RAISES)
    assert not out.ok and "no idea" in out.message and "debugging here" in out.message


def test_visible_tests_replace_the_hidden_ones(problems, sandbox):
    p = problems[0]
    fb = execution_feedback(problems, allow_code_execution=True, executor=sandbox,
                            visible_tests=lambda q: [f"assert not {q.entry_point}([1.0], 0.5)"])
    assert fb(p.prompt, WRONG).ok  # passes the one visible test, fails the hidden ones


def test_opt_in_checked_when_built_and_unknown_prompt_named(monkeypatch, problems, sandbox):
    monkeypatch.delenv(ENV_ALLOW, raising=False)
    with pytest.raises(CodeExecutionNotAllowed):
        execution_feedback(problems)
    fb = execution_feedback(problems, allow_code_execution=True, executor=sandbox)
    with pytest.raises(InvalidPromptError) as err:
        fb("not a problem", WRONG)
    assert err.value.param == "prompts"
