"""The int8 x int8 dot on VNNI (one vpdpbusd for the maddubs + maddwd pair): a build that targets
AVX-512 VNNI (or AVX-VNNI on the AVX2 path) gives the same products bit for bit as the same
path built without it, on one and two threads, over row counts across the register tiles and
the engine's widest batch, K with every kind of tail and N across the channel tiles. Each pair
runs only on a CPU with that extension (others skip, naming it)."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.native import int8_matmul as im
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS

from ._native_variants import cpu_flags, load_variant
from .test_int8_kernel import _case

# (name, CPU flag needed, flags with VNNI, flags without)
PAIRS = [
    ("avx512-vnni", "avx512_vnni", NATIVE_FLAGS, (*NATIVE_FLAGS, "-mno-avx512vnni")),
    ("avx2-avxvnni", "avx_vnni", (*AVX2_FLAGS, "-mavxvnni"), AVX2_FLAGS),
]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda p: p[0])
def pair(request, tmp_path_factory) -> tuple[im.Int8Matmul, im.Int8Matmul]:
    name, needs, with_vnni, without = request.param
    if needs not in cpu_flags():
        pytest.skip(f"this CPU has no {needs}")
    if name == "avx512-vnni" and "avx512bw" not in cpu_flags():
        pytest.skip("this CPU's native int8 path is the AVX2 one")
    fast = load_variant(im.load_from, (name, with_vnni), tmp_path_factory)
    plain = load_variant(im.load_from, (name + "-off", without), tmp_path_factory)
    assert fast.vnni and not plain.vnni and fast.isa == plain.isa
    return fast, plain


@pytest.mark.parametrize("threads", [1, 2])
def test_vnni_dot_equals_the_maddubs_pair_bit_for_bit(pair, threads):
    fast, plain = pair
    for seed, (m, k, n) in enumerate([(1, 64, 48), (1, 100, 17), (2, 33, 5), (3, 129, 23),
                                      (4, 512, 16), (5, 1, 3), (7, 63, 65), (16, 288, 130),
                                      (17, 65, 4), (32, 31, 9)]):
        x, q, scale, bias = _case(m, k, n, seed)
        x[0, 0] = -x[0, 0].abs() - 3.0  # a block whose largest magnitude is negative: q = -127
        for b in (bias, None):
            got = fast(x, q, scale, b, threads=threads, quantize_activations=True)
            ref = plain(x, q, scale, b, threads=threads, quantize_activations=True)
            assert torch.equal(got, ref), (m, k, n, b is None)
