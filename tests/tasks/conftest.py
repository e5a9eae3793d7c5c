"""Fixtures of the task tests: the shared data sets (../shared/data beside the project root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import SHARED

DATA = SHARED / "data"


def _data_file(name: str) -> Path:
    path = DATA / name
    if not path.exists():
        pytest.skip(f"{path} not found (../shared/data beside the project root)")
    return path


@pytest.fixture(scope="session")
def math500_path() -> Path:
    return _data_file("math500_test.jsonl")


@pytest.fixture(scope="session")
def gsm8k_test_path() -> Path:
    return _data_file("gsm8k_test.jsonl")


@pytest.fixture(scope="session")
def humaneval_path() -> Path:
    return _data_file("HumanEval.jsonl.gz")


@pytest.fixture(scope="session")
def mbpp_path() -> Path:
    return _data_file("mbpp.jsonl")


@pytest.fixture
def sandbox(default_sandbox):
    """The executor the library picks here (bubblewrap; skips where no sandbox works)."""
    from metagen.sandbox import check_code_execution
    return check_code_execution(True)


def grade_all(executor, problems, completions, parallel: int = 2, patient: bool = False):
    """Verdicts of ``completions[i]`` on ``problems[i]``, ``parallel`` gradings at a time.
    ``patient``: wall-clock and CPU limits 6x the defaults, for reference solutions that must
    pass also on a machine busy with other work or slower than ours -- a timeout there says
    nothing about the solution (mbpp/123's reference, a quadratic divisor search, needs ~20 CPU
    seconds on a 2.5 GHz Xeon VM and under 10 on a Zen 4)."""
    from concurrent.futures import ThreadPoolExecutor
    from dataclasses import replace

    from metagen.tasks import grade_code
    from metagen.tasks.code_problem import CODE_LIMITS
    kw = {} if not patient else {"call_seconds": 30.0, "limits": replace(
        CODE_LIMITS, wall_seconds=6 * CODE_LIMITS.wall_seconds,
        cpu_seconds=6 * CODE_LIMITS.cpu_seconds)}
    with ThreadPoolExecutor(parallel) as pool:
        return list(pool.map(lambda pc: grade_code(executor, *pc, **kw),
                             zip(problems, completions)))
