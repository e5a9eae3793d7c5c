"""benchmarks/int8_row.py times every way on both ISA builds in one C call per step, and its
baseline (here the same C files) gives one ratio per round for each int8 kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.int8_row import measure
from metagen.engine.native.int8_matmul import load

pytestmark = pytest.mark.skipif(load() is None, reason="no native kernels here")

NATIVE_DIR = Path(__file__).resolve().parents[2] / "metagen" / "engine" / "native"


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("resident", [False, True])
def test_every_way_timed_and_rated(isa, resident):
    r = measure(isa, NATIVE_DIR, threads=1, repeats=3, resident=resident,
                shapes=[(64, 48), (40, 32), (48, 17)])
    ways = {"plain read", "int8", "w8a8", "baseline int8", "baseline w8a8"}
    assert set(r["median_ms"]) == ways == set(r["gb_per_s"])
    assert all(ms >= 0 for ms in r["median_ms"].values())
    for name in ("int8", "w8a8"):
        q = r[f"{name}: baseline / new"]
        assert q["min"] <= q["median"] <= q["max"]
