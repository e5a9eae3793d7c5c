"""The caps with which ``make test`` runs the engine and decoding tests as an AVX2-only CPU computes
(on an AVX-512 CPU) take effect: each library reads back the ISA it dispatches to.

- ATen: ``ATEN_CPU_CAPABILITY=avx2`` -> ``torch.backends.cpu.get_cpu_capability()`` is ``AVX2``
  (and ``default`` gives ``DEFAULT``, so the read-back does follow the variable).
- MKL: ``MKL_ENABLE_INSTRUCTIONS=AVX2`` -> the header ``MKL_VERBOSE=1`` prints before the first
  call names the processors MKL dispatches for; under the cap it names no AVX-512 (on Intel
  CPUs it reads ``... (Intel(R) AVX2) enabled processors``; on AMD CPUs MKL names its generic
  ``Intel(R) Architecture processors`` with or without the cap).
- metagen: ``METAGEN_NATIVE_ISA=avx2`` -> the native library's ``mg_isa()`` is 256.

The last test checks the process it runs in: in ``make test``'s AVX2 pass it proves that pass ran
under the caps; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping

import pytest
import torch

from metagen.engine.native.build import compiler
from metagen.engine.native.cpu import cpu_flags

CAPS = {"METAGEN_NATIVE_ISA": "avx2", "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
HAS_AVX2 = {"avx2", "fma"} <= cpu_flags()
_MKL_HEADER = re.compile(r"MKL_VERBOSE .* architecture (.*?) processors")

_CHILD = """
import json, torch
x = torch.randn(64, 64)
x @ x  # one SGEMM: MKL_VERBOSE prints its header before it
from metagen.engine.native.library import library
lib = library()
print("READBACK " + json.dumps({"aten": torch.backends.cpu.get_cpu_capability(),
                                "native": None if lib is None else lib.mg_isa()}))
"""


def read_back(env: Mapping[str, str]) -> dict[str, object]:
    """What a fresh process under ``env`` (plus ``MKL_VERBOSE=1``) reports: ATen's capability,
    the processors MKL's header names (``None`` without MKL) and the native ``mg_isa()``."""
    done = subprocess.run([sys.executable, "-c", _CHILD], env=dict(env) | {"MKL_VERBOSE": "1"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout + done.stderr
    got: dict[str, object] = json.loads(out.split("READBACK ", 1)[1].splitlines()[0])
    header = _MKL_HEADER.search(out)
    got["mkl"] = header.group(1) if header else None
    return got


def _without_caps() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in CAPS}


@pytest.fixture(scope="module")
def capped() -> dict[str, object]:
    return read_back(_without_caps() | CAPS)


@pytest.mark.skipif(not HAS_AVX2, reason="needs a CPU with AVX2 + FMA")
def test_aten_reads_back_its_cap(capped):
    assert capped["aten"] == "AVX2"
    assert read_back(_without_caps() | {"ATEN_CPU_CAPABILITY": "default"})["aten"] == "DEFAULT"


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="this torch has no MKL")
def test_mkl_under_the_cap_names_no_avx512(capped):
    assert capped["mkl"] is not None, "MKL_VERBOSE printed no header"
    assert "512" not in str(capped["mkl"])
    uncapped = read_back(_without_caps())["mkl"]
    if "512" in str(uncapped):  # an Intel AVX-512 CPU: the cap must lower the dispatch to AVX2
        assert "AVX2" in str(capped["mkl"])


@pytest.mark.skipif(not HAS_AVX2 or compiler() is None, reason="needs AVX2 + FMA and a compiler")
def test_native_library_reads_back_the_avx2_build(capped):
    assert capped["native"] == 256


def test_this_run_computes_under_the_caps_it_sets():
    """In the AVX2 pass (all three caps set): this process's ATen and native library, and a
    child's MKL with the same environment, run AVX2 code."""
    if any(os.environ.get(k) != v for k, v in CAPS.items()):
        pytest.skip("not make test's AVX2 pass (the caps are not all set)")
    if not HAS_AVX2:
        pytest.skip("needs a CPU with AVX2 + FMA")
    from metagen.engine.native.library import library
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"
    lib = library()
    assert lib is None or lib.mg_isa() == 256
    assert "512" not in str(read_back(os.environ)["mkl"])
