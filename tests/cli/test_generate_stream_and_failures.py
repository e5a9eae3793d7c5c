"""``metagen generate --stream`` prints what the non-streamed run prints, refuses what it cannot
honour, and a failed completion (finish_reason "error") is reported with exit status 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metagen.cli import main
from tests.broken_checkpoints import copy_checkpoint

PROMPT = "Once upon a time"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("extra", [(), ("--stop", "Lily"), ("--max-tokens", "1")])
def test_stream_prints_the_greedy_text(capsys, stories_path, extra) -> None:
    argv = ("generate", str(stories_path), PROMPT, "--temperature", "0", "--max-tokens", "40",
            "--backend", "local", *extra)
    code, plain, err = run(capsys, *argv)
    assert code == 0, err
    code, streamed, err = run(capsys, *argv, "--stream")
    assert code == 0 and err == "", err
    assert streamed == plain and streamed.startswith(PROMPT)


@pytest.mark.parametrize("flags, reason", [
    (("--json",), "json"),
    (("--n", "2", "--temperature", "1"), "--n 2"),
    (("--backend", "hf"), "hf backend cannot stream"),
])
def test_stream_refusals_name_stream_before_loading(capsys, flags, reason) -> None:
    code, out, err = run(capsys, "generate", "/nonexistent/model", PROMPT, "--stream", *flags)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1
    assert lines[0].startswith("error: invalid stream=True") and reason in lines[0]


@pytest.fixture(scope="module")
def scripted_nan_model(tmp_path_factory, stories_path) -> Path:
    """stories260K with the embedding row of the prompt's last token set to NaN: every logit of
    a completion of PROMPT is NaN (a scripted numerical fault)."""
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    folder = copy_checkpoint(stories_path, tmp_path_factory.mktemp("nan") / "model")
    last = AutoTokenizer.from_pretrained(folder)(PROMPT)["input_ids"][-1]
    tensors = load_file(folder / "model.safetensors")
    tensors["model.embed_tokens.weight"][last] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


@pytest.mark.parametrize("backend", ["local", "hf"])
def test_scripted_nan_completion_is_reported_with_exit_1(capsys, scripted_nan_model,
                                                         backend) -> None:
    code, out, err = run(capsys, "generate", str(scripted_nan_model), PROMPT, "--temperature",
                         "0", "--max-tokens", "5", "--backend", backend)
    assert code == 1 and out == ""
    assert err.strip().splitlines() == ["error: completion 0 failed (numerical_error)"]


def test_scripted_nan_json_keeps_the_document_and_exits_1(capsys, scripted_nan_model) -> None:
    code, out, err = run(capsys, "generate", str(scripted_nan_model), PROMPT, "--temperature",
                         "0", "--max-tokens", "5", "--backend", "local", "--json")
    assert code == 1 and "completion 0 failed (numerical_error)" in err
    (comp,) = json.loads(out)["completions"]
    assert comp["finish_reason"] == "error" and comp["stop_reason"] == "numerical_error"


def test_scripted_nan_n2_reports_each_failed_completion(capsys, scripted_nan_model) -> None:
    code, out, err = run(capsys, "generate", str(scripted_nan_model), PROMPT, "--n", "2",
                         "--seed", "0", "--max-tokens", "5", "--backend", "local")
    assert code == 1 and "--- completion" not in out
    assert err.strip().splitlines() == ["error: completion 0 failed (numerical_error)",
                                        "error: completion 1 failed (numerical_error)"]


def test_scripted_nan_stream_is_reported_with_exit_1(capsys, scripted_nan_model) -> None:
    code, out, err = run(capsys, "generate", str(scripted_nan_model), PROMPT, "--temperature",
                         "0", "--max-tokens", "5", "--backend", "local", "--stream")
    assert code == 1 and out == PROMPT + "\n"
    assert err.strip().splitlines() == ["error: completion 0 failed (numerical_error)"]
