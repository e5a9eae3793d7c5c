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
