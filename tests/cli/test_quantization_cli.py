"""``--quantization int8`` (and ``w8a8``, ``int4``, ``int4-all``) reaches the engine from
``metagen generate`` (and names itself when it cannot apply); the testbed policy decodes the same
greedy answer in int8, w8a8 and int4 as in float32 (int4-all stores a tied head as int4 does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metagen.cli import main

POLICY = Path(__file__).resolve().parents[2] / "metagen" / "testbed" / "models" / "policy"
PROMPT = "Question: Sam has 12 apples and buys 7 more. How many apples does Sam have?\nAnswer:\n"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["generate", str(POLICY), PROMPT, "--temperature", "0", "--max-tokens", "32",
                 "--json", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("quantization", ["int8", "w8a8", "int4", "int4-all"])
def test_int8_generate_runs_on_the_engine_and_matches_float32(capsys, quantization) -> None:
    code, out, err = _run(capsys, "--quantization", quantization)
    assert code == 0, err
    q8 = json.loads(out)
    code, out, err = _run(capsys)
    assert code == 0, err
    f32 = json.loads(out)
    assert q8["backend"] == "local"  # auto picks the engine, which quantizes
    assert q8["completions"][0]["text"] == f32["completions"][0]["text"]  # measured: identical


def test_bad_or_inapplicable_quantization_is_one_line_naming_the_flag(capsys) -> None:
    for argv in (["--quantization", "int3"], ["--quantization", "int4", "--backend", "hf"]):
        code, out, err = _run(capsys, *argv)
        assert code != 0 and not out and "quantization" in err, (argv, err)
        assert "Traceback" not in err
