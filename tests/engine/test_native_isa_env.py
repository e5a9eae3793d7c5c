"""``METAGEN_NATIVE_ISA``: the build the engine's native kernels use, so an AVX-512 machine can run
(and test and measure) exactly what an AVX2-only machine runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, NativeBuildError, compiler
from metagen.engine.native.cpu import cpu_flags
from metagen.engine.native.library import requested_flags
from metagen.errors import InvalidParameterError

HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()


@pytest.mark.parametrize("value, flags", [(None, NATIVE_FLAGS), ("native", NATIVE_FLAGS),
                                          ("", NATIVE_FLAGS), (" AVX2 ", AVX2_FLAGS)])
def test_the_variable_names_the_build(monkeypatch, value, flags):
    if flags is AVX2_FLAGS and not HAS_AVX2:
        pytest.skip("this CPU has no AVX2 + FMA")
    if value is None:
        monkeypatch.delenv("METAGEN_NATIVE_ISA", raising=False)
    else:
        monkeypatch.setenv("METAGEN_NATIVE_ISA", value)
    assert requested_flags() == flags


def test_an_unknown_isa_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("METAGEN_NATIVE_ISA", "sse4")
    with pytest.raises(InvalidParameterError) as e:
        requested_flags()
    assert e.value.param == "METAGEN_NATIVE_ISA" and "avx2" in str(e.value)


@pytest.mark.skipif(HAS_AVX2, reason="needs a CPU without AVX2 + FMA")
def test_avx2_without_avx2_falls_back_rather_than_faulting(monkeypatch):
    monkeypatch.setenv("METAGEN_NATIVE_ISA", "avx2")
    with pytest.raises(NativeBuildError):
        requested_flags()


_CHILD = """
import json, sys
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.native.library import library
from metagen.types import SamplingParams

path, prompt = sys.argv[1], json.loads(sys.argv[2])
engine = LLMEngine.from_pretrained(path, tokenizer=False, device="cpu")
out = engine.generate([prompt], SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True))
print(json.dumps({"isa": library().mg_isa(), "tokens": list(out[0].outputs[0].token_ids),
                  "eos": list(engine.eos_token_ids)}))
"""


@pytest.mark.skipif(not HAS_AVX2 or compiler() is None, reason="needs AVX2 + FMA and a C compiler")
@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_engine_on_the_avx2_build_decodes_as_transformers(stories_path, hf_greedy, threads):
    """A fresh process with ``METAGEN_NATIVE_ISA=avx2`` loads the 256-bit library and greedy
    decoding on stories260K gives transformers' tokens, on one thread and two."""
    prompt = [1, 403, 407, 261, 378]  # "Once upon a time"
    env = os.environ | {"METAGEN_NATIVE_ISA": "avx2", "OMP_NUM_THREADS": threads}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(stories_path), json.dumps(prompt)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["isa"] == 256
    want, _ = hf_greedy(stories_path, prompt, 24, banned=tuple(got["eos"]))
    assert got["tokens"] == want
