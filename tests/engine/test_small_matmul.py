"""The native small-row kernel against torch.mm, its dispatch rule, its build cache and errors,
and the engine's forward through it against transformers."""

from __future__ import annotations


import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.engine.native import NativeBuildError, SmallMatmul
from metagen.engine.native import build as native_build
from metagen.engine.native import library as native_library
from metagen.engine.native import small_matmul as sm
from tests.tolerances import FLOAT_LOGPROB_TOL

from ._native_variants import cpu_flags, load_variant, variants


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def kernel(request, tmp_path_factory) -> SmallMatmul:
    return load_variant(sm.load_from, request.param, tmp_path_factory)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# K crosses the 16-row weight chunk and the 8-row sweep of the few-row path, N the 4096-column
# chunk and the 64/24-column register tile (full and masked tails), M the 6/4-row register tile
# (up to which the few-row path runs).
@settings(max_examples=60, deadline=None)
@given(m=st.integers(1, 20), k=st.sampled_from([1, 3, 16, 17, 40, 129]),
       n=st.sampled_from([1, 5, 8, 16, 23, 24, 63, 64, 65, 130, 4096, 4101]),
       with_bias=st.booleans(), seed=st.integers(0, 2**16))
def test_kernel_equals_torch_mm(kernel, m, k, n, with_bias, seed):
    g = torch.Generator().manual_seed(seed)
    x, w = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    bias = torch.randn(n, generator=g) if with_bias else None
    got = kernel(x, w, bias)
    ref = x.double() @ w.double() + (bias.double() if with_bias else 0)
    assert got.shape == (m, n) and got.dtype == torch.float32
    # fp32 sums of k products in another order: error within a few ulps of sum |x_i w_i|
    bound = 1e-6 * (x.double().abs() @ w.double().abs() + 1)
    assert ((got.double() - ref).abs() <= bound * 8).all()


def test_kernel_rejects_mismatched_shapes(kernel):
    from metagen.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="w"):
        kernel(torch.randn(3, 8), torch.randn(9, 4))
    with pytest.raises(InvalidParameterError, match="bias"):
        kernel(torch.randn(3, 8), torch.randn(8, 4), torch.randn(5))


def test_applies_where_the_measured_table_says_and_only_to_fitting_operands(kernel, one_thread):
    w = torch.randn(32, 48)
    for threads in (1, 2):
        torch.set_num_threads(threads)
        rows = kernel.rows()
        assert rows == kernel.rows(threads) and rows.highest >= 2  # measured on both ISAs
        assert [m for m in range(1, 40) if kernel.applies(torch.randn(m, 32), w, None)] == [
            m for m in range(1, 40) if rows.lowest <= m <= rows.highest]
    torch.set_num_threads(1)
    m = kernel.rows().highest
    assert kernel.applies(torch.randn(m, 32), w, torch.zeros(48))
    assert not kernel.applies(torch.randn(m, 32).double(), w.double(), None)
    assert not kernel.applies(torch.randn(32, m).t(), w, None)  # not contiguous
    assert not kernel.applies(torch.randn(m, 32, requires_grad=True), w, None)
    assert not kernel.applies(torch.randn(m, 32), w, torch.zeros(48).double())


# Every row count of the one-pass sweep and of the balanced multi-pass tiles (9-16 rows: B's
# best-of-16, step-search widths), over shapes that cross the 16-row weight chunk, the
# 4096-column chunk and both register tiles' masked tails; and the threaded split of them.
@pytest.mark.parametrize("m", range(1, 17))
def test_every_row_count_up_to_16_equals_torch_on_odd_shapes(kernel, m):
    g = torch.Generator().manual_seed(m)
    for k, n in ((129, 4101), (17, 23), (40, 130)):
        x, w, bias = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g), None
        if n == 23:
            bias = torch.randn(n, generator=g)
        got = kernel(x, w, bias, threads=1)
        ref = x.double() @ w.double() + (bias.double() if bias is not None else 0)
        bound = 1e-6 * (x.double().abs() @ w.double().abs() + 1)
        assert ((got.double() - ref).abs() <= bound * 8).all(), (m, k, n)
        assert torch.equal(kernel(x, w, bias, threads=3), got)  # any split: the same bits


def test_build_is_cached_by_source_and_flags(tmp_path, monkeypatch):
    if native_build.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setenv("METAGEN_CACHE_DIR", str(tmp_path))
    src = tmp_path / "k.c"
    src.write_text("int mg_one(void) { return 1; }\n")
    first = native_build.build(src, ("-O1",))
    stamp = first.stat().st_mtime_ns
    assert native_build.build(src, ("-O1",)) == first and first.stat().st_mtime_ns == stamp
    assert native_build.build(src, ("-O2",)) != first  # other flags, another library
    src.write_text("int mg_one(void) { return 2; }\n")
    assert native_build.build(src, ("-O1",)) != first  # edited source, rebuilt
    assert not list(tmp_path.glob("native/.*tmp"))  # no temporary file left behind


def test_build_failures_are_typed(tmp_path, monkeypatch):
    monkeypatch.setenv("METAGEN_CACHE_DIR", str(tmp_path))
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    if native_build.compiler() is not None:
        with pytest.raises(NativeBuildError, match="failed on bad.c"):
            native_build.build(bad)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    with pytest.raises(NativeBuildError, match="cannot run the C compiler"):
        native_build.build(bad)


def test_a_build_without_a_vector_path_is_refused(tmp_path, monkeypatch):
    if native_build.compiler() is None or "avx2" not in cpu_flags():
        pytest.skip("needs an x86-64 C compiler")
    monkeypatch.setenv("METAGEN_CACHE_DIR", str(tmp_path))
    with pytest.raises(NativeBuildError, match="without a vector path"):
        sm.load_from(("-O1", "-std=c11"))  # baseline x86-64: neither AVX2 nor AVX-512


def test_load_is_off_when_asked_and_never_raises(monkeypatch, tmp_path):
    def forget() -> None:
        sm.load.cache_clear()
        native_library.library.cache_clear()

    forget()
    try:
        monkeypatch.setenv("METAGEN_NATIVE", "0")
        assert sm.load() is None
        forget()
        monkeypatch.delenv("METAGEN_NATIVE")
        monkeypatch.setenv("METAGEN_CACHE_DIR", str(tmp_path))
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        assert sm.load() is None  # logged, falls back to torch.mm
    finally:
        monkeypatch.undo()
        forget()


@pytest.mark.parametrize("kind", ["llama", "qwen2"])  # qwen2: the q/k/v bias goes through it
def test_engine_forward_through_the_kernel_matches_transformers(random_model_dir, kind,
                                                                one_thread, monkeypatch):
    from transformers import AutoModelForCausalLM

    from metagen.engine.kv_cache import KVCache
    from metagen.engine.model_runner import ExtendRequest, ModelRunner
    from metagen.engine.models import load_model

    kernel = sm.load()
    if kernel is None:
        pytest.skip("native kernel unavailable on this machine")
    calls = []
    real_call = SmallMatmul.__call__

    def spy(self, x, w, bias=None):  # counts the kernel's uses, then runs it
        calls.append(x.shape[0])
        return real_call(self, x, w, bias)

    monkeypatch.setattr(SmallMatmul, "__call__", spy)
    path = random_model_dir(kind)
    hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    model = load_model(path)
    ids = torch.randint(3, 96, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0]
    c = model.cfg
    runner = ModelRunner(model, KVCache(c.num_layers, 32, 4, c.num_kv_heads, c.head_dim,
                                        model.dtype, "cpu"), native=False)  # project() alone
    got, pos = [], 0
    chunks = (16, 2, 3, 1, 5, 8, 16, 9)  # the rows in kernel.rows() take the kernel
    for n in chunks:
        got.append(runner.extend([ExtendRequest(list(range(15)), pos, ids[pos:pos + n], True)])[0])
        pos += n
    assert pos == len(ids)
    assert sorted(set(calls)) == sorted({n for n in chunks if n in kernel.rows()})
    assert (torch.cat(got) - ref).abs().max() < FLOAT_LOGPROB_TOL  # tests/tolerances.py
