"""The task registry: each task's items load, are keyed uniquely, and its reference solution
grades as correct; the data fingerprint and template fingerprint feed the run key."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.eval.runkey import file_sha256
from metagen.eval.tasks import TASKS, get_task
from tests.conftest import SHARED

DATA = {"gsm8k": SHARED / "data" / "gsm8k_test.jsonl",
        "math500": SHARED / "data" / "math500_test.jsonl",
        "humaneval": SHARED / "data" / "HumanEval.jsonl.gz", "mbpp": SHARED / "data" / "mbpp.jsonl",
        "mbpp_0shot": SHARED / "data" / "mbpp.jsonl"}
CODE_TASKS = ("humaneval", "mbpp", "mbpp_0shot")


def _reference(task: str, problem) -> str:
    if task == "gsm8k":
        return problem.solution
    if task == "math500":
        return f"so the answer is \\boxed{{{problem.answer}}}"
    if task in CODE_TASKS:
        return problem.reference
    return problem.solutions[0]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_items_load_keyed_uniquely_and_references_grade_correct(name, request, monkeypatch):
    path = DATA.get(name)
    if path is not None and not path.exists():
        pytest.skip(f"{path} not found")
    if name in CODE_TASKS:  # graded in the sandbox: needs one, and the opt-in
        request.getfixturevalue("default_sandbox")
        monkeypatch.setenv("METAGEN_ALLOW_CODE_EXECUTION", "1")
    task = get_task(name)
    items = task.items(path, 5)
    assert len(items) == 5 and len({it.id for it in items}) == 5
    assert all(it.prompt == task.format_prompt(it.problem) for it in items)
    if name == "math500":
        pytest.importorskip("math_verify")
    assert all(task.grade(_reference(name, it.problem), it.problem) for it in items)
    assert not task.grade("no answer here", items[0].problem)
    assert task.items(path, 3) == items[:3]  # a limit takes a prefix: a larger one extends
    if path is not None:
        assert task.data_fingerprint(path) == file_sha256(path)
    assert len(task.template_fingerprint()) == 64


def test_unknown_task_and_missing_or_extra_data_are_named():
    with pytest.raises(InvalidParameterError, match="task.*gsm8k, humaneval, math500, mbpp, mbpp_0shot, testbed"):
        get_task("nope")
    with pytest.raises(InvalidParameterError, match="data.*needs --data"):
        get_task("gsm8k").items(None, 1)
    with pytest.raises(InvalidParameterError, match="data.*generates its own"):
        get_task("testbed").items("x.jsonl", 1)
