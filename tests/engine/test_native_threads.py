"""The native kernels on several threads equal the one-thread kernels bit for bit.

Each thread computes a disjoint slice of every product's output columns, heads and attention
units with the one-thread instructions, so the thread count must not change a single bit: the
products against the whole-matrix one-thread ``mg_matmul``; the decode step and native attention
on 2, 3 and 4 threads against 1 thread, over the paged cache with several rows, multi-token rows
and Hydragen prefix groups, on random-weight models and stories260K. (The engine at torch's
default thread count decoding as transformers does is ``test_decode_step.py``'s stories test.)
"""

from __future__ import annotations

import ctypes
import random
from typing import Any

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.loader import load_model
from metagen.engine.native.decode_step import DecodeStep
from metagen.engine.native.library import open_library
from metagen.errors import InvalidParameterError

from ._native_variants import variants

BLOCK = 4
NUM_BLOCKS = 192
THREADS = (1, 2, 3, 4)


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def lib(request) -> ctypes.CDLL:
    try:
        return open_library(request.param[1])
    except Exception as e:  # no compiler or no vector path: nothing native to test
        pytest.skip(f"no native {request.param[0]} library: {e}")


def _whole_product(lib: ctypes.CDLL, x, w, bias) -> torch.Tensor:
    """The one-thread kernel over the whole matrix (``mg_matmul``, no slicing)."""
    y = torch.empty(x.shape[0], w.shape[1])
    p = ctypes.c_void_p
    lib.mg_matmul.argtypes = [p, p, p, p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
    lib.mg_matmul(x.data_ptr(), w.data_ptr(), None if bias is None else bias.data_ptr(),
                  y.data_ptr(), *x.shape, w.shape[1])
    return y


# M covers the few-row sweep (<= 6 / 4 rows) and the chunked tiles (more); N covers slices
# narrower than one cache line per thread, masked tails and the 4096-column chunk.
@pytest.mark.parametrize("m", [1, 2, 5, 7, 16])
@pytest.mark.parametrize("n", [8, 40, 130, 4101])
def test_threaded_product_equals_the_one_thread_kernel_bitwise(lib, m, n):
    from metagen.engine.native.small_matmul import SmallMatmul

    kernel = SmallMatmul(lib)
    g = torch.Generator().manual_seed(m * 10_000 + n)
    x, w, bias = torch.randn(m, 37, generator=g), torch.randn(37, n, generator=g), \
        torch.randn(n, generator=g)
    for b in (None, bias):
        ref = _whole_product(lib, x, w, b)
        for t in THREADS:
            assert torch.equal(kernel(x, w, b, threads=t), ref), (t, b is None)


@pytest.mark.parametrize("m", [1, 2, 5, 7, 16])
@pytest.mark.parametrize("n", [40, 130, 4101])
@pytest.mark.parametrize("p", [16, 64])
def test_panel_major_product_equals_the_row_major_kernel_bitwise(lib, m, n, p):
    """``mg_matmul_panels`` over a panel-major copy, whole and in slices of whole panels (one
    row: the four-panels-at-once path where the slice holds four panels of the build's width,
    64 on AVX-512 and 16 on AVX2; more rows than a register tile holds, on AVX2: passes over
    each 16-column panel), equals the row-major one-thread kernel bit for bit."""
    from metagen.engine.native.decode_step import panel_major

    g = torch.Generator().manual_seed(m * 10_000 + n + p)
    x, w, bias = torch.randn(m, 37, generator=g), torch.randn(37, n, generator=g), \
        torch.randn(n, generator=g)
    packed = panel_major(w, p)
    i, f = ctypes.c_int64, ctypes.c_void_p
    lib.mg_matmul_panels.argtypes = [f, f, f, f, i, i, i, i, i, i]
    for b in (None, bias):
        ref = _whole_product(lib, x, w, b)
        for cut in sorted({0, p, 5 * p, n // p * p} & set(range(0, n, p))):
            y = torch.full((m, n), float("nan"))
            for c0, c1 in ((0, cut), (cut, n)):
                if c1 > c0:
                    lib.mg_matmul_panels(x.data_ptr(), packed.data_ptr(),
                                         None if b is None else b.data_ptr(), y.data_ptr(), m,
                                         37, n, p, c0, c1)
            assert torch.equal(y, ref), (cut, b is None)


@pytest.mark.parametrize("panel", [16, 32, 64])
def test_panel_major_decode_step_equals_the_row_major_one_bitwise(lib, random_model_dir, panel):
    """Every projection read from panel-major copies (16: the AVX2 build's storage-order tiles,
    the default for o and down there; 32: the sliced sweep; 64: the AVX-512 build's tiles), on 1, 2, 3, 7 and
    16 threads, steps as the row-major weights on one thread, bit for bit (and so as PyTorch,
    within test_decode_step's tolerances)."""
    folder = random_model_dir("llama")
    plain = _runners(lib, folder, threads=(1,), panelled=())
    packed = _runners(lib, folder, threads=(1, 2, 3, 7, 16),
                      panelled=("qkv", "o", "gate_up", "down"), panel=panel)
    assert _drive(plain + packed, f"panels{panel}") > 0


def test_panel_copies_are_shared_per_model_and_remade_after_an_in_place_change(
        lib, random_model_dir):
    """Steps built over one loaded model share its panel-major copies (one copy per model, not
    per engine); a weight changed in place moves its version counter, and a step built after
    that gets new copies of the changed weights."""
    from metagen.engine.native.decode_step import panel_major

    model = load_model(random_model_dir("llama"))
    a, b = (DecodeStep(lib, model, panelled=("o", "down"), panel=16) for _ in range(2))
    assert a._copies[0]["o"].data_ptr() == b._copies[0]["o"].data_ptr()
    with torch.no_grad():
        model.layers[0].o.mul_(0.5)
    c = DecodeStep(lib, model, panelled=("o", "down"), panel=16)
    assert c._copies[0]["o"].data_ptr() != a._copies[0]["o"].data_ptr()
    assert torch.equal(c._copies[0]["o"], panel_major(model.layers[0].o, 16))
    assert torch.equal(c._copies[1]["down"], panel_major(model.layers[1].down, 16))
    # other panel widths are other copies
    d = DecodeStep(lib, model, panelled=("o", "down"), panel=32)
    assert torch.equal(d._copies[0]["o"], panel_major(model.layers[0].o, 32))


def test_thread_count_must_be_positive(lib):
    from metagen.engine.native.small_matmul import SmallMatmul

    for bad in (0, -2, 1.5, True):
        with pytest.raises(InvalidParameterError, match="threads"):
            SmallMatmul(lib)(torch.randn(2, 4), torch.randn(4, 3), threads=bad)


class _Seq:
    def __init__(self, table: list[int], cached: int) -> None:
        self.table, self.cached = table, cached


def _runners(lib: ctypes.CDLL, folder, quantization: str | None = None,
             threads: tuple[int, ...] = THREADS, **step: Any) -> list[ModelRunner]:
    """One runner per thread count on one model, each with its own KV cache; ``step``: the
    :class:`DecodeStep`'s keyword arguments (panel-major copies)."""
    model = load_model(folder, quantization=quantization)
    cfg = model.cfg
    out = []
    for t in threads:
        kv = KVCache(cfg.num_layers, NUM_BLOCKS, BLOCK, cfg.num_kv_heads, cfg.head_dim,
                     torch.float32, "cpu")
        runner = ModelRunner(model, kv, hydragen=True)
        runner.native = DecodeStep(lib, model, **step)
        runner.native.threads = t
        out.append(runner)
    return out


def _drive(runners: list[ModelRunner], seed: str, steps: int = 8) -> int:
    """Prefill two prompts in the first runner (PyTorch), give every runner a copy of that cache,
    fork each prompt into rows sharing its blocks, then run the same random native steps in all
    runners; every step's logits and the whole cache must be equal bit for bit. Returns the
    number of rows that attended through a Hydragen group."""
    rng = random.Random(seed)
    first = runners[0]
    free = list(range(1, NUM_BLOCKS))
    rng.shuffle(free)
    seqs: list[_Seq] = []
    for _ in range(2):
        n = rng.randrange(9, 70)
        table = [free.pop() for _ in range(-(-n // BLOCK))]
        first.extend([ExtendRequest(table, 0, [rng.randrange(3, 90) for _ in range(n)])])
        full = n // BLOCK
        for _ in range(rng.randrange(2, 4)):
            own = table[:full] + [free.pop() for _ in table[full:]]
            first.kv.copy_blocks(table[full:], own[full:])
            seqs.append(_Seq(own, n))
    for r in runners[1:]:
        r.kv.k.copy_(first.kv.k)
        r.kv.v.copy_(first.kv.v)
    for _ in range(steps):
        budget = first.native.max_tokens
        reqs = []
        for s in rng.sample(seqs, rng.randrange(1, len(seqs) + 1)):
            k = min(budget, 1 if rng.random() < 0.6 else rng.randrange(2, 5))
            if k == 0:
                break
            budget -= k
            while len(s.table) * BLOCK < s.cached + k:
                s.table.append(free.pop())
            reqs.append(ExtendRequest(list(s.table), s.cached,
                                      [rng.randrange(3, 90) for _ in range(k)], all_logits=k > 1))
            s.cached += k
        before = [r.native_steps for r in runners]
        outs = [r.extend(reqs) for r in runners]
        assert [r.native_steps for r in runners] == [b + 1 for b in before]  # all native
        for r, out in zip(runners[1:], outs[1:]):
            assert all(torch.equal(a, b) for a, b in zip(out, outs[0])), r.native.threads
    for r in runners[1:]:
        assert torch.equal(r.kv.k, first.kv.k) and torch.equal(r.kv.v, first.kv.v), \
            r.native.threads
    return first.hydragen_rows


@pytest.mark.parametrize("kind", ["llama", "qwen2", "qwen3"])
def test_decode_step_on_n_threads_equals_one_thread_bitwise(lib, random_model_dir, kind):
    assert _drive(_runners(lib, random_model_dir(kind)), kind) > 0  # groups were exercised


def test_stories_decode_step_on_n_threads_equals_one_thread_bitwise(lib, stories_path):
    """stories260K: head_dim 8 (masked vectors, the per-query group path), 5 layers."""
    assert _drive(_runners(lib, stories_path), "stories") > 0


@pytest.mark.parametrize("kind", ["llama", "stories"])
def test_int8_decode_step_on_n_threads_equals_one_thread_bitwise(lib, random_model_dir,
                                                                 stories_path, kind):
    """int8 projections (llama: an untied LM head too; stories260K: K = 172, a scalar tail)."""
    folder = stories_path if kind == "stories" else random_model_dir(kind)
    assert _drive(_runners(lib, folder, "int8"), f"int8{kind}") > 0


def _one_row_prompt(runners: list[ModelRunner]) -> tuple[list[int], list[int]]:
    """A 37-token prompt through PyTorch (too long for the native step), alike in each runner;
    returns its block table and tokens."""
    table = list(range(1, 13))
    tokens = [3 + (7 * i) % 80 for i in range(37)]
    for r in runners:
        r.extend([ExtendRequest(table, 0, tokens)])
    return table, tokens


def test_one_row_decode_on_n_threads_equals_one_thread_bitwise(lib, random_model_dir):
    """Batch-1 decoding: one row, whose kv heads a step's attention units take in runs (both
    kv heads in one unit on one thread, one each on two or more) and whose gate|up product the
    threads cut across both halves; every step's logits and the cache equal one thread's."""
    runners = _runners(lib, random_model_dir("llama"))
    table, tokens = _one_row_prompt(runners)
    for pos in range(37, 45):
        outs = [r.extend([ExtendRequest(table, pos, [tokens[pos % 37]])])[0] for r in runners]
        assert all(torch.equal(o, outs[0]) for o in outs[1:]), pos
    assert all(r.native_steps == 8 for r in runners)
    for r in runners[1:]:
        assert torch.equal(r.kv.k, runners[0].kv.k) and torch.equal(r.kv.v, runners[0].kv.v)


def test_more_threads_than_units_or_cores_equal_one_thread_bitwise(lib, random_model_dir):
    """With 7 and 16 threads, on a model whose products have fewer column units than threads
    (most threads get none) and on a machine with fewer cores (threads join late or not at
    all), every step equals one thread's bit for bit."""
    assert _drive(_runners(lib, random_model_dir("llama"), threads=(1, 7, 16)), "many") > 0


def test_concurrent_decode_steps_get_the_one_thread_results(lib, random_model_dir):
    """Two Python threads decode at once on three threads each (one gets the pool, the other
    runs alone, or they alternate): both equal one thread's steps bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    runners = _runners(lib, random_model_dir("llama"), threads=(1, 3, 3))
    table, tokens = _one_row_prompt(runners)
    with ThreadPoolExecutor(2) as ex:
        for pos in range(37, 45):
            reqs = [ExtendRequest(table, pos, [tokens[pos % 37]])]
            ref = runners[0].extend(reqs)[0]
            got = list(ex.map(lambda r: r.extend(reqs)[0], runners[1:]))
            assert all(torch.equal(g, ref) for g in got), pos
    for r in runners[1:]:
        assert torch.equal(r.kv.k, runners[0].kv.k) and torch.equal(r.kv.v, runners[0].kv.v)


def test_native_attention_on_n_threads_equals_one_thread_bitwise(lib, random_model_dir):
    """Attention alone (wide steps' rows under PyTorch products), over the cache the threaded
    decode step wrote, with a Hydragen group and a row of several tokens."""
    runners = _runners(lib, random_model_dir("llama"))
    _drive(runners, "attention", steps=3)
    runner = runners[0]
    reqs = [ExtendRequest(runner_table, 12, [5] * n)
            for runner_table, n in (([1, 2, 3, 4, 5], 1), ([1, 2, 3, 6, 7], 3), ([9, 8, 10, 11], 2))]
    plan = runner._plan(reqs)
    cfg = runner.model.cfg
    q = torch.randn(6, cfg.num_heads + 2 * cfg.num_kv_heads, cfg.head_dim)[:, :cfg.num_heads]
    outs = [runner.native.attention(q, runner.kv.k[1], runner.kv.v[1], plan, threads=t)
            for t in THREADS]
    assert all(torch.equal(o, outs[0]) for o in outs[1:])


def test_a_forked_child_runs_threaded_kernels(lib):
    """After a fork only the forking thread exists: the child's threaded kernels still finish,
    with the parent's results, instead of waiting on pool threads that are not there."""
    import os
    import signal

    from metagen.engine.native.small_matmul import SmallMatmul

    kernel = SmallMatmul(lib)
    g = torch.Generator().manual_seed(3)
    x, w = torch.randn(3, 64, generator=g), torch.randn(64, 200, generator=g)
    ref = kernel(x, w, threads=3)  # the pool is started in this process
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the threaded product is right, killed if it hangs
        signal.alarm(60)
        try:
            os._exit(0 if torch.equal(kernel(x, w, threads=3), ref) else 1)
        finally:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_concurrent_callers_get_the_one_thread_results(lib):
    """ctypes releases the GIL, so two Python threads can call the kernels at once: one gets
    the pool, the other runs its job alone; both results equal one thread's, bit for bit."""
    from concurrent.futures import ThreadPoolExecutor

    from metagen.engine.native.small_matmul import SmallMatmul

    kernel = SmallMatmul(lib)
    g = torch.Generator().manual_seed(5)
    jobs = [(torch.randn(m, 256, generator=g), torch.randn(256, 1000, generator=g))
            for m in (1, 3, 8, 16)] * 8
    refs = [kernel(x, w, threads=1) for x, w in jobs]
    with ThreadPoolExecutor(4) as ex:
        got = list(ex.map(lambda xw: kernel(*xw, threads=3), jobs))
    assert all(torch.equal(a, b) for a, b in zip(got, refs))


def test_per_row_work_after_the_forward_runs_torch_inline(stories_path, monkeypatch):
    """Sampling runs with torch on one thread (no OpenMP region to leave workers spinning into
    the next native step, spied on the scripted sampler), a logits hook on the caller's thread
    count (it may run models: the lockstep generator's); the count is restored after."""
    import metagen.engine.llm_engine as llm_engine
    from metagen.engine.config import EngineConfig
    from metagen.types import SamplingParams

    engine = build_engine(load_model(stories_path), None, EngineConfig(device="cpu", block_size=8))
    in_hook: list[int] = []
    in_sampler: list[int] = []

    def hook(logits, states):
        in_hook.append(torch.get_num_threads())
        return logits

    def spied_decode_step(logits, states, kernels=None):
        in_sampler.append(torch.get_num_threads())
        return decode_step(logits, states, kernels)

    decode_step = llm_engine.decode_step
    monkeypatch.setattr(llm_engine, "decode_step", spied_decode_step)
    engine.logits_hook = hook
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        out = engine.generate([[1, 403, 407]], SamplingParams(temperature=0, max_tokens=4))
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)
    assert len(out[0].outputs[0].token_ids) == 4
    assert in_sampler == [1, 1, 1, 1] and in_hook == [3, 3, 3, 3]


@pytest.mark.parametrize("variant", variants(), ids=lambda v: v[0])
def test_stage_clock_build_decodes_as_the_plain_build_bitwise(variant, random_model_dir):
    """The benchmark build with the stage clock (``-DMG_STAGE_CLOCK``, benchmarks/step_stages.py)
    only adds the clock: on 1 and 2 threads it decodes the same as the plain build bit for bit
    (logits and cache), and its clock has counted work in every stage kind that ran, none
    negative."""
    try:
        clocked = open_library((*variant[1], "-DMG_STAGE_CLOCK"))
        plain = open_library(variant[1])
    except Exception as e:  # no compiler or no vector path: nothing native to test
        pytest.skip(f"no native {variant[0]} library: {e}")
    runners = _runners(plain, random_model_dir("llama"), threads=(1, 1, 2))
    for r, t in zip(runners[1:], (1, 2)):
        r.native = DecodeStep(clocked, r.model)
        r.native.threads = t
    clock = (ctypes.c_int64 * (64 * 2 * 6))()  # (MG_MAX_THREADS, work | wait, stage kind)
    clocked.mg_stage_clock(clock)  # clears
    _drive(runners, "clock")
    clocked.mg_stage_clock(clock)
    ns = torch.tensor(list(clock)).reshape(64, 2, 6)
    assert (ns >= 0).all()
    work = ns[:, 0].sum(0)
    assert (work[[0, 2, 3, 4, 5]] > 0).all(), work  # q|k|v, own attention, o, gate|up, down


def test_torch_ops_inline_keeps_the_native_count_nests_and_restores():
    """Inside, torch runs on one thread and ``resolve(None)`` (what a native kernel without an
    explicit count uses) is the count torch had; a nested block keeps the outer one's; both are
    restored after, on an exception too."""
    from metagen.engine.native.threads import resolve, torch_ops_inline

    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        with torch_ops_inline():
            assert (torch.get_num_threads(), resolve(None), resolve(2)) == (1, 3, 2)
            with torch_ops_inline():
                assert (torch.get_num_threads(), resolve(None)) == (1, 3)
            assert (torch.get_num_threads(), resolve(None)) == (1, 3)
        assert (torch.get_num_threads(), resolve(None)) == (3, 3)
        with pytest.raises(RuntimeError), torch_ops_inline():
            raise RuntimeError("inside")
        assert (torch.get_num_threads(), resolve(None)) == (3, 3)
    finally:
        torch.set_num_threads(before)


def test_a_prefill_over_native_int4_products_runs_torch_inline(random_model_dir, monkeypatch):
    """A PyTorch-path forward whose products are native (int4 weights: any row count) runs
    torch's operators on one thread and the products on the caller's count (spied on the norms
    and the kernel's resolved count); a float32 prefill, whose products are torch's, keeps
    torch's count for everything; the logits of the prefill equal a one-thread run's to float32
    rounding (the products are bitwise equal on any count; torch's operators may sum in another
    order at another count: a few ulps of values of order 1, far inside 1e-4)."""
    from metagen.engine.models import llama
    from metagen.engine.native import int4_matmul
    from metagen.engine.native.threads import resolve

    folder = random_model_dir("llama")
    norms: list[int] = []
    products: list[int] = []
    norm = llama.rms_norm
    monkeypatch.setattr(llama, "rms_norm",
                        lambda *a: norms.append(torch.get_num_threads()) or norm(*a))
    call = int4_matmul.Int4Matmul.__call__
    monkeypatch.setattr(int4_matmul.Int4Matmul, "__call__", lambda self, *a, **k: (
        products.append(resolve(k.get("threads"))), call(self, *a, **k))[1])

    def prefill(quantization: str | None, threads: int) -> torch.Tensor:
        model = load_model(folder, quantization=quantization)
        kv = KVCache(model.cfg.num_layers, 16, BLOCK, model.cfg.num_kv_heads, model.cfg.head_dim,
                     torch.float32, "cpu")
        runner = ModelRunner(model, kv, native=False)
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            return runner.extend([ExtendRequest(list(range(10)), 0, list(range(3, 40)))])[0]
        finally:
            torch.set_num_threads(before)

    if int4_matmul.load() is None:
        pytest.skip("no native int4 kernel on this machine")
    int4 = prefill("int4", 2)
    assert norms and set(norms) == {1} and products and set(products) == {2}
    norms.clear()
    assert torch.allclose(int4, prefill("int4", 1), rtol=0, atol=1e-4)
    norms.clear()
    prefill(None, 2)
    assert norms and set(norms) == {2}
