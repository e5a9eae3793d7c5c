"""Refinement with execution feedback on a code task through the runner (scripted generator,
graded and fed back in the default sandbox): the task's feedback source is the item's unit
tests, so a wrong first attempt revised after feedback passes; each N's result equals the
library's call with the same seed and the same feedback."""

from __future__ import annotations

import pytest

from metagen.eval import EvalConfig, get_task, run_eval
from metagen.eval.runner import STORE_NAME
from metagen.eval.seeds import direct_seed
from metagen.eval.store import RunStore
from metagen.generators.mock import MockGenerator
from metagen.sandbox import ENV_ALLOW
from metagen.strategies import refine_with_feedback, treefinement
from metagen.tasks.code_feedback import execution_feedback
from metagen.tasks.mbpp import END_MARKER
from metagen.types import SamplingParams
from tests.tasks.conftest import _data_file

WRONG = "def nothing():\n    pass\n" + END_MARKER
SAMPLING = SamplingParams(temperature=0.8, max_tokens=2000)


@pytest.mark.parametrize("strategy", ["refine_with_feedback", "treefinement"])
def test_scripted_feedback_refinement_on_mbpp_equals_the_library_call(strategy, tmp_path,
                                                                      monkeypatch,
                                                                      default_sandbox):
    monkeypatch.setenv(ENV_ALLOW, "1")
    path = _data_file("mbpp.jsonl")
    task = get_task("mbpp")
    items = task.items(path, 2)

    def script(prompt: str, j: int) -> str:  # wrong at first, right once given feedback
        item = next(it for it in items if prompt.startswith(it.prompt))
        if "Feedback on the attempt above" in prompt:
            return item.problem.reference + "\n" + END_MARKER
        return WRONG

    cfg = EvalConfig(task="mbpp", model={"path": "scripted"}, strategy=strategy, ns=(1, 2),
                     sampling=SAMPLING, seed=3, data=str(path), limit=2, attempts=1)
    report, code = run_eval(cfg, task, tmp_path, load_generator=lambda: MockGenerator(script))
    assert code == 0 and report["accounting"]["done"] == 2
    with RunStore(tmp_path / STORE_NAME) as store:
        acc = {(r[0], r[2]): r[4] for r in store.results() if r[3] == "accuracy"}
    function = {"refine_with_feedback": refine_with_feedback, "treefinement": treefinement}
    for it in items:
        for n in (1, 2):
            knobs = ({"max_attempts": n} if strategy == "refine_with_feedback"
                     else {"width": min(4, n), "max_depth": max(1, n // min(4, n))})
            ref = function[strategy](MockGenerator(script), [it.prompt],
                                     execution_feedback([it.problem]),
                                     params=SAMPLING.with_(n=1, seed=direct_seed(3, it.id, n)),
                                     **knobs)[0]
            assert acc[(it.id, n)] == float(task.grade(ref.text, it.problem))
    if strategy == "refine_with_feedback":  # one attempt fails; a second, after feedback, passes
        assert {acc[(it.id, 1)] for it in items} == {0.0}
        assert {acc[(it.id, 2)] for it in items} == {1.0}
