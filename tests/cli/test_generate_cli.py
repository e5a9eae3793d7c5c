"""``metagen`` CLI: --version, generate --json schema, one-line errors with non-zero exit."""

from __future__ import annotations

import json

import pytest

from metagen._version import __version__
from metagen.cli import main
from metagen.cli.generate import available_backends

COMPLETION_KEYS = {"text", "token_ids", "logprobs", "cumulative_logprob", "finish_reason", "num_tokens",
                   "stop_reason", "top_logprobs"}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys) -> None:
    code, out, _ = run(capsys, "--version")
    assert code == 0 and __version__ in out


@pytest.mark.parametrize("backend", ["auto", *available_backends()])
def test_generate_json_greedy_lily(capsys, stories_path, backend) -> None:
    code, out, err = run(capsys, "generate", str(stories_path), "Once upon a time",
                         "--temperature", "0", "--max-tokens", "30", "--json",
                         "--backend", backend)
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"model", "backend", "prompt", "params", "completions", "usage"}
    (comp,) = doc["completions"]
    assert set(comp) == COMPLETION_KEYS
    assert comp["text"].startswith(", there was a little girl named Lily.")
    assert len(comp["token_ids"]) == len(comp["logprobs"]) == 30
    assert comp["finish_reason"] == "length"
    assert doc["usage"]["generated_tokens"] == 30 and doc["usage"]["calls"] == 1
    assert doc["params"]["max_tokens"] == 30
    assert doc["backend"] == (available_backends()[0] if backend == "auto" else backend)


def test_generate_text_output_with_n_and_stop(capsys, stories_path) -> None:
    code, out, err = run(capsys, "generate", str(stories_path), "Once upon a time", "--n", "2",
                         "--seed", "3", "--max-tokens", "12", "--stop", ".", "--logprobs", "2")
    assert code == 0, err
    assert out.count("--- completion") == 2
    assert out.count("Once upon a time") == 2


@pytest.mark.parametrize("flag, value, param", [
    ("--top-p", "1.5", "top_p"),
    ("--top-p", "abc", "top_p"),
    ("--n", "0", "n"),
    ("--max-tokens", "1.5", "max_tokens"),
    ("--temperature", "nan", "temperature"),
    ("--seed", "x", "seed"),
])
def test_bad_flag_is_one_line_naming_the_parameter(capsys, flag, value, param) -> None:
    # the model path is never opened: parameters are validated first
    code, out, err = run(capsys, "generate", "/nonexistent/model", "Hi", flag, value)
    assert code != 0 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and param in lines[0] and "Traceback" not in err


def test_missing_model_and_unknown_backend_are_one_line(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "generate", str(tmp_path / "nope"), "Hi")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "config.json" in err
    code, _, err = run(capsys, "generate", str(tmp_path), "Hi", "--backend", "nope")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "backend" in err


def test_hf_backend_is_available() -> None:
    assert "hf" in available_backends()


def test_auto_backend_falls_back_to_hf_for_other_architectures(capsys, random_gpt2_path) -> None:
    code, out, err = run(capsys, "generate", str(random_gpt2_path), "Once upon a time",
                         "--temperature", "0", "--max-tokens", "5", "--json")
    assert code == 0, err
    assert json.loads(out)["backend"] == "hf"
    if "local" in available_backends():
        assert "note: backend local cannot load this model" in err
        code, _, err = run(capsys, "generate", str(random_gpt2_path), "Hi", "--backend", "local")
        assert code != 0 and len(err.strip().splitlines()) == 1


def test_python_m_metagen_top_p_subprocess(stories_path) -> None:
    """The real console path, in a subprocess: exit status 2 and one line on stderr."""
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "metagen", "generate", str(stories_path),
                           "Once upon a time", "--top-p", "1.5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: invalid top_p=1.5: must be in (0.0, 1.0]"]
