"""UnitTestVerifier: best-of-N and rejection sampling on HumanEval problems in the default
sandbox, with a scripted generator whose samples are a wrong body, a syntax error, an infinite
loop and the canonical solution; the opt-in, unknown prompts and sandbox failures."""

from __future__ import annotations

import pytest

from metagen.errors import CodeExecutionNotAllowed, InvalidPromptError, SandboxUnavailable
from metagen.sandbox import ENV_ALLOW, check_code_execution
from metagen.scorers import UnitTestVerifier
from metagen.scorers.execution import ATTEMPTS
from metagen.strategies import best_of_n, rejection_sampling
from metagen.tasks import load_humaneval
from metagen.types import SamplingParams
from tests.scorers.test_execution import _ScriptedExecutor
from tests.strategies._scripted_steps import ScriptedStepGenerator
from tests.tasks.conftest import _data_file

WRONG = "    return not_a_name_defined_anywhere\n"
SYNTAX = "    return (\n"
LOOP = "    while True:\n        pass\n"
PARAMS = SamplingParams(max_tokens=4000)


@pytest.fixture(scope="module")
def problems():
    return load_humaneval(_data_file("HumanEval.jsonl.gz"), limit=3)


def canonical(p) -> str:
    return p.reference[len(p.prompt):]


def verifier(problems, default_sandbox, **kw):
    return UnitTestVerifier(problems, allow_code_execution=True,
                            executor=check_code_execution(True), call_seconds=2.0, **kw)


def test_scripted_best_of_n_picks_the_passing_sample(problems, default_sandbox):
    by_prompt = {p.prompt: p for p in problems}
    gen = ScriptedStepGenerator(
        lambda prompt, i: [WRONG, SYNTAX, canonical(by_prompt[prompt]), LOOP][i])
    v = verifier(problems, default_sandbox)
    results = best_of_n(gen, [p.prompt for p in problems[:2]], n=4, reward=v, params=PARAMS)
    for p, r in zip(problems, results):
        assert r.text == canonical(p) and r.scores == [0.0, 0.0, 1.0, 0.0]
    assert v.usage.scorer_calls == 8  # two problems x four distinct programs


def test_scripted_rejection_sampling_accepts_the_first_passing(problems, default_sandbox):
    p = problems[0]
    gen = ScriptedStepGenerator(lambda prompt, i: [WRONG, WRONG, canonical(p), WRONG][i])
    v = verifier(problems, default_sandbox)
    r = rejection_sampling(gen, p.prompt, v, batch=4, max_samples=8, params=PARAMS)
    assert r.text == canonical(p)
    assert v.usage.scorer_calls == 2  # the identical wrong samples are graded once


def test_timeout_scores_zero_and_is_not_a_sandbox_error(problems, default_sandbox):
    v = verifier(problems, default_sandbox)
    assert v.score([problems[1].prompt], [LOOP]) == [0.0]


def test_prompt_of_no_problem_is_named(problems, default_sandbox):
    v = verifier(problems, default_sandbox)
    with pytest.raises(InvalidPromptError) as err:
        v.score(["def unknown():\n"], [WRONG])
    assert err.value.param == "prompts"
    with pytest.raises(InvalidPromptError):
        v.score([[{"role": "user", "content": "x"}]], [WRONG])


def test_refused_without_opt_in_before_anything_runs(monkeypatch, problems):
    monkeypatch.delenv(ENV_ALLOW, raising=False)
    ex = _ScriptedExecutor(failures=0)
    with pytest.raises(CodeExecutionNotAllowed, match="allow_code_execution"):
        UnitTestVerifier(problems)
    with pytest.raises(CodeExecutionNotAllowed):
        UnitTestVerifier(problems, executor=ex)
    assert ex.calls == 0


def test_scripted_sandbox_errors_retry_then_raise_instead_of_scoring(problems):
    p = problems[0]
    ok = UnitTestVerifier(problems, allow_code_execution=True,
                          executor=_ScriptedExecutor(failures=ATTEMPTS - 1))
    assert ok.score([p.prompt], [canonical(p)]) == [1.0]
    broken = UnitTestVerifier(problems, allow_code_execution=True,
                              executor=_ScriptedExecutor(failures=ATTEMPTS))
    with pytest.raises(SandboxUnavailable, match="not scored"):
        broken.score([p.prompt], [canonical(p)])
