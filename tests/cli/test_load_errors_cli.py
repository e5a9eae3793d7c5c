"""``metagen generate`` on broken checkpoints: exit status 2, one line on stderr naming the file or
field, no traceback, nothing on stdout -- and ``--backend auto`` never falls back to transformers
for a checkpoint the engine finds inconsistent."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from metagen.cli import main
from tests.broken_checkpoints import BROKEN, copy_checkpoint, edit_config


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, named: str) -> None:
    lines = err.strip().splitlines()
    assert code == 2 and out == "", (code, out, err)
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], err
    assert "Traceback" not in err and "note: backend" not in err


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_checkpoint_exits_2_with_one_line(capsys, tmp_path, stories_path, case) -> None:
    break_it, named = BROKEN[case]
    folder = copy_checkpoint(stories_path, tmp_path / case)
    break_it(folder)
    code, out, err = run(capsys, "generate", str(folder), "Once upon a time", "--max-tokens",
                         "4", "--backend", "auto")
    assert_one_line_error(code, out, err, named)


@pytest.mark.parametrize("backend", ["hf", "local", "auto"])
@pytest.mark.parametrize("device", ["bogus", "cuda"])
def test_unavailable_device_exits_2_naming_device(capsys, stories_path, backend, device) -> None:
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    code, out, err = run(capsys, "generate", str(stories_path), "Hi", "--backend", backend,
                         "--device", device)
    assert_one_line_error(code, out, err, f"device={device!r}")


@pytest.mark.parametrize("case", ["weights_cast_to_int8", "more_layers_than_weights",
                                  "hidden_size_not_the_weights"])
def test_hf_backend_refuses_what_the_engine_refuses(capsys, tmp_path, stories_path,
                                                    case) -> None:
    """The same checks on both backends: ``--backend hf`` exits 2 with the engine's own line
    (an int8-cast checkpoint used to run on transformers and print nonsense)."""
    break_it, named = BROKEN[case]
    folder = copy_checkpoint(stories_path, tmp_path / case)
    break_it(folder)
    lines = {}
    for backend in ("local", "hf"):
        code, out, err = run(capsys, "generate", str(folder), "Once upon a time",
                             "--max-tokens", "4", "--backend", backend)
        assert_one_line_error(code, out, err, named)
        lines[backend] = err
    assert lines["hf"] == lines["local"]


def test_absurd_max_position_embeddings_still_generates(capsys, tmp_path, stories_path) -> None:
    folder = copy_checkpoint(stories_path, tmp_path / "long")
    edit_config(max_position_embeddings=1_000_000_000)(folder)
    code, out, err = run(capsys, "generate", str(folder), "Once upon a time", "--temperature",
                         "0", "--max-tokens", "12", "--backend", "local")
    assert code == 0, err
    assert out.startswith("Once upon a time, there was a little girl named Lily")


@pytest.mark.parametrize("backend", ["auto", "hf"])
def test_console_path_subprocess_layers50(tmp_path, stories_path, backend) -> None:
    """The real console, where transformers' log lines and Python warnings would reach the
    terminal: still exactly one line and exit status 2."""
    folder = copy_checkpoint(stories_path, tmp_path / "layers50")
    edit_config(num_hidden_layers=50)(folder)
    proc = subprocess.run([sys.executable, "-m", "metagen", "generate", str(folder),
                           "Once upon a time", "--backend", backend],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "num_hidden_layers=50" in line  # the engine's check, on both backends
