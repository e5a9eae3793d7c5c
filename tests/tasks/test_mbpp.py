"""MBPP: the standard split, the paper's 3-shot prompt, entry points, assembly, and every
reference solution of the test split through the sandboxed grader."""

from __future__ import annotations

import ast

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks import UNPASSABLE, assemble_program, load_mbpp, mbpp_entry_point
from tests.tasks.conftest import grade_all

INTRO = "You are an expert Python programmer, and here is your task: "


@pytest.fixture(scope="module")
def problems(mbpp_path):
    return load_mbpp(mbpp_path)


def test_standard_split_sizes_and_ids(mbpp_path, problems):
    assert [p.task_id for p in problems] == [f"mbpp/{i}" for i in range(11, 511)]
    sizes = {s: len(load_mbpp(mbpp_path, s)) for s in ("prompt", "validation", "train", "all")}
    assert sizes == {"prompt": 10, "validation": 90, "train": 374, "all": 974}
    assert len(load_mbpp(mbpp_path, limit=3)) == 3
    with pytest.raises(InvalidParameterError, match="split"):
        load_mbpp(mbpp_path, "dev")


def test_zero_shot_prompt_is_the_three_shot_prompts_last_example(mbpp_path, problems):
    zero = load_mbpp(mbpp_path, limit=2, shots=0)
    for z, p in zip(zero, problems):
        assert z.prompt.startswith(INTRO) and z.prompt.count(INTRO) == 1
        assert p.prompt.endswith(z.prompt) and z.prompt.endswith("[BEGIN]\n")
        assert (z.task_id, z.tests, z.entry_point) == (p.task_id, p.tests, p.entry_point)
    for bad in (-1, 4, True, "3"):
        with pytest.raises(InvalidParameterError, match="shots"):
            load_mbpp(mbpp_path, limit=1, shots=bad)


def test_three_shot_prompt_in_the_papers_format(problems):
    p = problems[0]
    assert p.prompt.startswith(
        INTRO + "Write a function to find the similar elements from the given two tuple "
        "lists. Your code should pass these tests:\n\nassert similar_elements((3, 4, 5, 6),"
        "(5, 7, 4, 10)) == (4, 5)\n")
    assert p.prompt.count(INTRO) == 4 and p.prompt.count("[BEGIN]\n") == 4
    assert p.prompt.count("\n[DONE]\n") == 3
    assert p.prompt.endswith(
        INTRO + p.description + " Your code should pass these tests:\n\n"
        + "\n".join(p.tests) + "\n[BEGIN]\n")
    assert "def is_not_prime(n):" in p.prompt and "heap_queue_largest" in p.prompt


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # references with invalid escapes
def test_entry_points_are_what_the_reference_defines(problems):
    for p in problems:
        defined = {n.name for n in ast.parse(p.reference).body if isinstance(n, ast.FunctionDef)}
        assert p.entry_point in defined, p.task_id
    assert problems[126 - 11].entry_point == "sum"  # the reference shadows the builtin
    assert mbpp_entry_point(["assert set(f(1)) == {1}"]) == "f"
    with pytest.raises(ValueError):
        mbpp_entry_point(["assert len([1]) == 1"])


def test_a_completion_ends_at_done(problems):
    p = problems[0]
    assert assemble_program(p, "def f():\n    pass\n[DONE]\nYou are ...") == "def f():\n    pass\n"
    assert assemble_program(p, "```python\ndef f(): pass\n```\n[DONE]") == "def f(): pass\n"


def _task_number(p) -> int:
    return int(p.task_id.split("/")[1])


def _grade_references(sandbox, chosen):
    """{task number: verdict} of the references of ``chosen``; every one must be scored."""
    verdicts = grade_all(sandbox, chosen, [p.reference for p in chosen], patient=True)
    assert all(v.scored for v in verdicts)
    return {_task_number(p): v for p, v in zip(chosen, verdicts)}


def test_every_tenth_reference_and_the_listed_ones_grade_as_listed(sandbox, problems):
    """The fast form of the next test: every tenth problem plus each listed unpassable one,
    so every failure reason is still read (the full 500 take minutes: marked slow)."""
    chosen = [p for i, p in enumerate(problems) if i % 10 == 0 or _task_number(p) in UNPASSABLE]
    graded = _grade_references(sandbox, chosen)
    assert sorted(k for k, v in graded.items() if not v.passed) == sorted(UNPASSABLE)
    _check_reasons({k: v.reason for k, v in graded.items() if not v.passed})


@pytest.mark.slow
def test_every_reference_passes_but_the_listed_ones(sandbox, problems):
    graded = _grade_references(sandbox, problems)
    failed = {k: v for k, v in graded.items() if not v.passed}
    assert sorted(failed) == sorted(UNPASSABLE), {k: v.reason for k, v in failed.items()}
    assert sum(v.passed for v in graded.values()) == 496
    _check_reasons({k: v.reason for k, v in failed.items()})


def _check_reasons(why: dict[int, str]) -> None:
    assert all("returned a Counter, which is not a primitive value" in why[k] for k in (40, 88))
    assert "builtins.complex is not a primitive value" in why[124]
    assert "name 'Node' is not defined" in why[367]


def test_a_wrong_reference_fails_with_per_assert_outcomes(sandbox, problems):
    p = problems[0]  # remove_Occ; the reference of task 12 defines another function
    v = grade_all(sandbox, [p, p], [problems[1].reference,
                                    p.reference.replace("break", "pass", 1)])
    assert v[0].outcomes == (False, False, False) and "no function 'remove_Occ'" in v[0].reason
    assert not v[1].passed and False in v[1].outcomes
