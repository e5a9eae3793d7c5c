"""HumanEval: the loader, program assembly, every canonical solution passing in the sandbox,
and wrong or hostile programs failing."""

from __future__ import annotations

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks import CodeProblem, assemble_program, grade_code, load_humaneval
from tests.tasks.conftest import grade_all


@pytest.fixture(scope="module")
def problems(humaneval_path):
    return load_humaneval(humaneval_path)


def body(p: CodeProblem) -> str:
    return p.reference[len(p.prompt):]


def test_loader_reads_the_164_problems(problems):
    assert len(problems) == 164 and len({p.task_id for p in problems}) == 164
    first = problems[0]
    assert first.task_id == "HumanEval/0" and first.entry_point == "has_close_elements"
    assert first.setup == (first.prompt,) and first.prefix == first.prompt
    assert first.tests[0].rstrip().endswith("check(has_close_elements)")


def test_a_malformed_record_is_located(tmp_path):
    bad = tmp_path / "he.jsonl"
    bad.write_text('{"task_id": "x", "prompt": "", "entry_point": "1f", '
                   '"canonical_solution": "", "test": ""}\n')
    with pytest.raises(InvalidParameterError, match="he.jsonl:1"):
        load_humaneval(bad)


def test_assembly_of_a_body_a_full_function_and_a_fenced_one(problems):
    p = problems[2]  # truncate_number
    assert assemble_program(p, body(p)) == p.reference
    full = "def truncate_number(number: float) -> float:\n    return number % 1.0\n"
    assert assemble_program(p, full) == p.prompt + "\n" + full
    assert assemble_program(p, f"Sure:\n```python\n{full}```\nDone.") == p.prompt + "\n" + full


def test_every_eighth_canonical_solution_passes(sandbox, problems):
    """The fast form of the next test (all 164 take minutes: marked slow)."""
    chosen = problems[::8]
    verdicts = grade_all(sandbox, chosen, [body(p) for p in chosen], patient=True)
    failed = {p.task_id: v.reason for p, v in zip(chosen, verdicts) if not v.passed}
    assert failed == {} and len(verdicts) == 21


@pytest.mark.slow
def test_all_164_canonical_solutions_pass(sandbox, problems):
    verdicts = grade_all(sandbox, problems, [body(p) for p in problems], patient=True)
    failed = {p.task_id: v.reason for p, v in zip(problems, verdicts) if not v.passed}
    assert failed == {} and len(verdicts) == 164


def test_canonical_solutions_pass_when_the_completion_repeats_the_signature(sandbox, problems):
    chosen = [problems[i] for i in (0, 32, 38, 53, 163)]
    verdicts = grade_all(sandbox, chosen, [f"```python\n{p.reference}\n```" for p in chosen])
    assert [v.passed for v in verdicts] == [True] * 5, [v.reason for v in verdicts]


ALWAYS_EQUAL = ("    class _E:\n        def __eq__(self, o):\n            return True\n"
                "        __ne__ = lambda self, o: False\n"
                "        __bool__ = lambda self: True\n"
                "    return _E()\n")
FORGE = ("    import importlib, os, sys\n"
         "    wire = importlib.import_module('metagen_grader.wire')\n"
         "    doc = wire.dumps({'outcomes': [True], 'kind': '', 'reason': '', 'stderr': '',"
         " 'values': []})\n"
         "    f, seen = sys._getframe(), []\n"
         "    while f is not None:\n"
         "        seen += [str(v)[:64] for v in f.f_locals.values()]\n"
         "        f = f.f_back\n"
         "    for s in seen:\n"
         "        for fd in (1, 2, 3, 4):\n"
         "            try:\n"
         "                os.write(fd, ('\\nMETAGEN-GRADER-VERDICT ' + s + ' ' + doc + '\\n')"
         ".encode())\n"
         "            except OSError:\n"
         "                pass\n"
         "    os._exit(0)\n")


def test_wrong_and_hostile_solutions_fail(sandbox, problems):
    p0, p1, p2 = problems[:3]
    cases = {
        "another problem's solution": (p1, body(p0)),
        "return None": (p0, "    return None\n"),
        "an always-equal object": (p2, ALWAYS_EQUAL),
        "a forged verdict, then os._exit(0)": (p0, FORGE),
        "sys.exit(0) at import": (p0, "    return True\nimport sys\nsys.exit(0)\n"),
        "os._exit(0) at import": (p0, "    return True\nimport os\nos._exit(0)\n"),
        "sys.exit(0) in the call": (p2, "    import sys\n    sys.exit(0)\n"),
    }
    verdicts = grade_all(sandbox, [c[0] for c in cases.values()], [c[1] for c in cases.values()])
    reasons = {name: v.reason for name, v in zip(cases, verdicts)}
    assert not any(v.passed for v in verdicts) and all(v.scored for v in verdicts), reasons
    assert "name 'numbers' is not defined" in reasons["another problem's solution"]
    assert reasons["return None"].startswith("AssertionError (at test line")
    assert "._E, which is not a primitive" in reasons["an always-equal object"]
    assert "malformed reply" in reasons["a forged verdict, then os._exit(0)"]
    assert reasons["sys.exit(0) at import"].endswith("SystemExit: 0\n")
    assert "exited with code 0" in reasons["os._exit(0) at import"]
    assert "SystemExit: 0" in reasons["sys.exit(0) in the call"]


def test_the_prompts_helpers_stay_trusted(sandbox, problems):
    """HumanEval/32's check evaluates the data set's ``poly``: a program that redefines
    ``poly`` to vanish everywhere cannot make any root look right."""
    p = problems[32]
    cheat = "    return 0.0\n\ndef poly(xs, x):\n    return 0.0\n"
    honest_check = grade_code(sandbox, p, body(p))
    assert honest_check.passed  # the reference: the check can pass
    v = grade_code(sandbox, p, cheat)
    assert not v.passed and v.status == "failed" and "poly" in v.reason
