"""The streaming-read probe of benchmarks/weight_pages.py reads every float it is given, on any
thread count and both ISA builds."""

from __future__ import annotations

import pytest
import torch

from benchmarks.weight_pages import read_probe
from metagen.engine.models.weight_arena import WeightArena
from metagen.engine.native import load_small_matmul

pytestmark = pytest.mark.skipif(load_small_matmul() is None, reason="no native kernels here")


@pytest.mark.parametrize("isa", ["native", "avx2"])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n", [1, 63, 64, 1000, 4097])
def test_probe_sums_every_float(isa, threads, n):
    probe = read_probe(isa)
    buf = WeightArena([(n,)]).take((n,))
    buf.copy_(torch.arange(n, dtype=torch.float32) % 7)  # small integers: every sum is exact
    assert probe(buf, threads) == float(buf.double().sum())
