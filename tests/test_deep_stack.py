"""Deeply chained grammars: llguidance builds grammars recursively, and a rule chain a few
thousand deep overflowed a default thread stack (SIGSEGV: the whole process, every request in it,
gone). Built on a deep stack, such a constraint is checked, compiled and decoded like any other.
Run in a child process, so that a regression is a failed test, not a crashed test run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from metagen.constraints import INSTALL_HINT
from metagen.deep_stack import on_deep_stack

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import sys
from metagen.engine.llm_engine import LLMEngine
from metagen.types import SamplingParams
n = 5000  # a default 8 MiB stack overflowed near 2,500 here
grammar = 'start: r0\\n' + ''.join(f'r{i}: "a" r{i+1} | "b"\\n' for i in range(n)) + f'r{n}: "c"\\n'
defs = {f"d{i}": {"anyOf": [{"type": "object", "required": ["a"],
                             "properties": {"a": {"$ref": f"#/$defs/d{i + 1}"}}},
                            {"type": "null"}]} for i in range(3000)}
defs["d3000"] = {"type": "null"}
engine = LLMEngine.from_pretrained(sys.argv[1])
for params in (SamplingParams(grammar=grammar, max_tokens=6, temperature=0.0),
               SamplingParams(json_schema={"$defs": defs, "$ref": "#/$defs/d0"}, max_tokens=6,
                              temperature=0.0)):
    out = engine.generate([[1, 403, 407]], params)[0].outputs[0]
    print(repr(out.text), out.finish_reason)
"""


def test_result_and_exception_come_back_to_the_caller():
    assert on_deep_stack(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError, match="x"):
        on_deep_stack({}.__getitem__, "x")


def test_deep_rule_and_ref_chains_compile_and_decode(stories_path):
    pytest.importorskip("llguidance", reason=INSTALL_HINT)
    run = subprocess.run([sys.executable, "-c", CHILD, str(stories_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert len(lines) == 2 and all(line.endswith(("stop", "length")) for line in lines), lines
