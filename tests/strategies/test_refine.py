"""Refinement loops on scripted generators and feedback: stop on success, on no progress, on
budget; batched rounds; self-refine with scripted critiques."""

from __future__ import annotations

import json
import re

import pytest
from tests.strategies._scripted_steps import ScriptedStepGenerator

from metagen.errors import InvalidParameterError
from metagen.strategies.budget import Budget
from metagen.strategies.refine import Feedback, refine_with_feedback, self_refine


def _attempt_script(prompt: str, i: int) -> str:
    """The first attempt is "answer 0"; a revision of "answer k" is "answer k+1"."""
    found = re.findall(r"answer (\d+)", prompt)
    return f"answer {int(found[-1]) + 1 if found else 0}"


def _until(k: int):
    def feedback(prompt: str, attempt: str) -> Feedback:
        got = int(attempt.split()[-1])
        return Feedback(ok=got == k, message=f"{got} is wrong" if got != k else "ok",
                        score=float(got))
    return feedback


def test_scripted_feedback_loop_stops_on_success():
    gen = ScriptedStepGenerator(_attempt_script)
    [res] = refine_with_feedback(gen, ["Q: "], _until(2), max_attempts=5)
    assert res.text == "answer 2" and res.trace["stop_reason"] == "success"
    assert [a["text"] for a in res.trace["chain"]] == ["answer 0", "answer 1", "answer 2"]
    assert len(gen.calls) == 3
    # the feedback goes into the next attempt's prompt
    assert gen.calls[1][0] == ["Q: answer 0\n\nFeedback on the attempt above:\n0 is wrong\n\n"
                               "Revised attempt:\n"]
    assert res.scores == [0.0, 1.0, 2.0] and res.usage.generated_tokens == 24
    json.dumps(res.trace)


def test_scripted_feedback_loop_stops_on_max_attempts_and_batches_prompts():
    gen = ScriptedStepGenerator(_attempt_script)
    fast, slow = refine_with_feedback(gen, ["A: ", "B: "], lambda p, a: _until(
        1 if p.startswith("A") else 9)(p, a), max_attempts=3)
    assert fast.trace["stop_reason"] == "success" and fast.text == "answer 1"
    assert slow.trace["stop_reason"] == "max_attempts" and slow.text == "answer 2"  # best score
    assert [len(p) for p, _ in gen.calls] == [2, 2, 1]  # finished chains leave the batch
    assert fast.usage.calls + slow.usage.calls == 3


def test_scripted_no_progress_repeated_attempt():
    gen = ScriptedStepGenerator(lambda p, i: "same")
    [res] = refine_with_feedback(gen, ["Q: "], lambda p, a: Feedback(ok=False, message="no"),
                                 max_attempts=5)
    assert res.trace["stop_reason"] == "no_progress" and len(res.trace["chain"]) == 2


def test_scripted_no_progress_by_score_with_patience():
    gen = ScriptedStepGenerator(_attempt_script)
    worse = lambda p, a: Feedback(ok=False, message="x", score=-float(a.split()[-1]))  # noqa
    [res] = refine_with_feedback(gen, ["Q: "], worse, max_attempts=9, patience=2)
    assert res.trace["stop_reason"] == "no_progress" and len(res.trace["chain"]) == 3
    assert res.text == "answer 0"  # the best-scored attempt


def test_scripted_budget_stops_the_loop():
    gen = ScriptedStepGenerator(_attempt_script)
    [res] = refine_with_feedback(gen, ["Q: "], _until(99), max_attempts=9,
                                 budget=Budget(max_generated_tokens=20))
    assert gen.usage.generated_tokens <= 20 and res.stopped_by_budget
    assert res.trace["stop_reason"] == "budget" and len(res.trace["chain"]) == 3
    assert res.trace["chain"][2] == {"attempt": 2, "text": "answ", "tokens": 4,
                                     "finish_reason": "length", "budget_cut": True}
    assert res.text == "answer 1"  # the cut attempt got no feedback, so no score
    gen = ScriptedStepGenerator(_attempt_script)
    [res] = refine_with_feedback(gen, ["Q: "], _until(99), max_attempts=9,
                                 budget=Budget(max_calls=3))
    assert len(gen.calls) == 3 and res.stopped_by_budget


def test_scripted_failed_attempt_is_counted_and_retried():
    seen: list[str] = []

    def flaky(prompt: str, i: int) -> str | None:
        seen.append(prompt)
        return None if len(seen) == 1 else _attempt_script(prompt, i)
    gen = ScriptedStepGenerator(flaky)
    [res] = refine_with_feedback(gen, ["Q: "], _until(0), max_attempts=3)
    assert seen == ["Q: ", "Q: "]  # retried with the same prompt
    assert res.failures == {"generation_error": 1} and res.text == "answer 0"
    assert res.trace["chain"][0]["error"] is True and len(res.candidates) == 1


def _self_script(prompt: str, i: int) -> str:
    if prompt.endswith("Review:"):
        attempt = prompt.split("Q: ", 1)[1].split("\n")[0] if "Improved" not in prompt \
            else prompt.rsplit("Improved attempt:\n", 1)[1].split("\n")[0]
        return " NO ISSUES" if "good" in attempt else " step 2 is wrong"
    return "good" if "Improved attempt" in prompt else "bad"


def test_scripted_self_refine_stops_when_the_critique_says_so():
    gen = ScriptedStepGenerator(_self_script)
    [res] = self_refine(gen, ["Q: "], max_attempts=4)
    assert res.text == "good" and res.trace["stop_reason"] == "success"
    chain = res.trace["chain"]
    assert [a["text"] for a in chain] == ["bad", "good"]
    assert chain[0]["feedback"] == " step 2 is wrong" and chain[1]["ok"] is True
    assert len(gen.calls) == 4  # attempt, critique, attempt, critique
    assert "Review: step 2 is wrong" in gen.calls[2][0][0]
    assert res.usage.generated_tokens == gen.usage.generated_tokens


def test_scripted_self_refine_no_progress_and_bad_options():
    gen = ScriptedStepGenerator(lambda p, i: " wrong" if p.endswith("Review:") else "bad")
    [res] = self_refine(gen, ["Q: "], max_attempts=4)
    assert res.trace["stop_reason"] == "no_progress" and res.text == "bad"
    with pytest.raises(InvalidParameterError):
        self_refine(gen, ["Q: "], critique_template="no slots")
    with pytest.raises(InvalidParameterError):
        refine_with_feedback(gen, ["Q: "], _until(1), max_attempts=0)


def test_scripted_self_refine_failed_critique_keeps_the_attempt():
    def script(prompt: str, i: int) -> str | None:
        return None if prompt.endswith("Review:") else "bad"
    [res] = self_refine(ScriptedStepGenerator(script), ["Q: "], max_attempts=2)
    assert res.failures == {"critique_error": 2} and res.text == "bad"
    assert res.trace["stop_reason"] == "max_attempts" and len(res.candidates) == 2
