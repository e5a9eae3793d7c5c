"""benchmarks/int8_stream.py times every way on both ISA builds, and its baseline (here the same
C files) gives one ratio per round for each int8 kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.int8_stream import A8, F32, Q8, READ, measure
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS
from metagen.engine.native.int8_matmul import load

pytestmark = pytest.mark.skipif(load() is None, reason="no native kernels here")

NATIVE_DIR = Path(__file__).resolve().parents[2] / "metagen" / "engine" / "native"


@pytest.mark.parametrize("flags", [NATIVE_FLAGS, AVX2_FLAGS], ids=["native", "avx2"])
@pytest.mark.parametrize("resident", [False, True])
def test_every_way_timed_and_rated(flags, resident):
    rows = measure([1, 3], repeats=3, threads=1, flags=flags, baseline=NATIVE_DIR,
                   resident=resident, shapes=[(64, 48), (40, 32), (48, 17)])
    assert [r["rows"] for r in rows] == [1, 3]
    for r in rows:
        ways = {F32, READ, Q8, A8, "baseline " + Q8, "baseline " + A8}
        assert set(r["median_ms"]) == ways == set(r["gb_per_s"])
        assert all(ms >= 0 for ms in r["median_ms"].values())
        for name in (Q8, A8):
            q = r[f"{name}: baseline / new"]
            assert q["min"] <= q["median"] <= q["max"]
