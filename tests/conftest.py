"""Shared fixtures: the paths of ../shared (beside the project root) and small models."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _absl_never_closes_pytests_capture() -> None:
    """rouge-score imports absl, whose stderr handler keeps the stream it finds at import --
    pytest's capture file, during collection -- and closes it whenever logging is reconfigured
    (uvicorn's ``dictConfig`` when a test starts a server) unless that stream is the current
    ``sys.stderr``, which under ``capsys`` it is not: pytest's own capture then fails ("I/O
    operation on closed file", and the run dies with "lost sys.stderr"). Pointed at the real
    stderr, which absl never closes, the handler is harmless."""
    try:
        import absl.logging
    except ImportError:
        return
    absl.logging.get_absl_handler().python_handler.stream = sys.__stderr__


_absl_never_closes_pytests_capture()

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
STORIES = SHARED / "models" / "stories260K"


@pytest.fixture(scope="session")
def stories_path() -> Path:
    if not (STORIES / "config.json").exists():
        pytest.skip(f"{STORIES} not found (../shared beside the project root)")
    return STORIES


def with_chat_template(out: Path, template: str) -> Path:
    """A copy of stories260K in ``out`` whose tokenizer carries the Jinja chat ``template``."""
    import shutil

    from transformers import AutoTokenizer
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        shutil.copy(STORIES / name, out / name)
    tok = AutoTokenizer.from_pretrained(STORIES)
    tok.chat_template = template
    tok.save_pretrained(out)
    return out


@pytest.fixture
def default_sandbox(monkeypatch) -> str:
    """The name of the backend :func:`metagen.sandbox.default_executor` picks here when nothing
    is named (``METAGEN_SANDBOX_BACKEND`` is cleared); skips where no sandbox works."""
    from metagen.errors import SandboxUnavailable
    from metagen.sandbox import check_code_execution
    from metagen.sandbox.preflight import ENV_BACKEND, INSTALL_HINT
    monkeypatch.delenv(ENV_BACKEND, raising=False)
    try:
        return check_code_execution(True).name
    except SandboxUnavailable as exc:
        why = "; ".join(exc.reasons)
        pytest.skip(f"no working sandbox here: {why}"
                    + ("" if INSTALL_HINT in why else f" ({INSTALL_HINT})"))
