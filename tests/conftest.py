"""Shared fixtures: the paths of ../shared (beside the project root) and small models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
STORIES = SHARED / "models" / "stories260K"


@pytest.fixture(scope="session")
def stories_path() -> Path:
    if not (STORIES / "config.json").exists():
        pytest.skip(f"{STORIES} not found (../shared beside the project root)")
    return STORIES
