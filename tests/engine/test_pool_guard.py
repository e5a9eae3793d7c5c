"""The native pool's oversubscription guard: where a job's threads spend more than a quarter of
their time waiting on each other (another process holds a core), twice in a row, the pool runs
the next jobs on the caller alone, then tries its threads again, backing off exponentially while
the tries strike and coming back as jobs run clean.

The rule is a pure function of each job's wall time and waits, tested here on scripted timings
(``mg_guard_test``, no job runs). That the guard changes no result follows from every job being
the same bit for bit on any number of threads (``test_native_threads.py``); the real fallback,
beside busy processes, is the slow test at the end and ``python -m benchmarks.oversubscribed``.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import pytest
import torch

from metagen.engine.native.library import library

MS = 1_000_000  # ns
QUIET, LOST = (10 * MS, 1 * MS), (10 * MS, 8 * MS)  # 5 % and 40 % of 2 threads' time


@pytest.fixture(scope="module")
def lib() -> ctypes.CDLL:
    lib = library()
    if lib is None:
        pytest.skip("no native library on this machine (no compiler or no AVX2/AVX-512)")
    return lib


@pytest.fixture(scope="module")
def limits(lib: ctypes.CDLL) -> tuple[int, int, int]:
    """(jobs alone at a first fallback, at most, strikes in a row that start the first)."""
    out = (ctypes.c_int * 3)()
    lib.mg_guard_limits(out)
    return out[0], out[1], out[2]


def _solo_after(lib: ctypes.CDLL, jobs: list[tuple[int, int]], threads: int = 2) -> list[int]:
    """Jobs run alone after each of ``jobs`` (wall, waits), each tried after the last's ran."""
    n = len(jobs)
    walls = (ctypes.c_int64 * n)(*(w for w, _ in jobs))
    waits = (ctypes.c_int64 * n)(*(w for _, w in jobs))
    out = (ctypes.c_int * n)()
    lib.mg_guard_test(walls, waits, ctypes.c_int64(n), threads, out)
    return list(out)


def test_limits_are_a_real_backoff(limits):
    first, most, strikes = limits
    assert strikes == 2 and 1 <= first < most


def test_scripted_timings_two_strikes_in_a_row_fall_back_one_does_not(lib, limits):
    first = limits[0]
    assert _solo_after(lib, [QUIET, LOST, QUIET, LOST, QUIET]) == [0] * 5  # never two in a row
    assert _solo_after(lib, [QUIET, LOST, LOST, QUIET]) == [0, 0, first, 0]


def test_scripted_timings_the_threshold_is_a_quarter_of_the_threads_time(lib, limits):
    at = (10 * MS, 5 * MS)  # 5 ms of 2 x 10 ms: exactly 25 %, not a strike
    above = (10 * MS, 5 * MS + 1)
    assert _solo_after(lib, [at, at, at]) == [0, 0, 0]
    assert _solo_after(lib, [above, above]) == [0, limits[0]]
    # the bound scales with the threads: 5 ms + 1 of 4 x 10 ms is 12.5 %
    assert _solo_after(lib, [above, above], threads=4) == [0, 0]


def test_strikes_on_every_try_double_the_jobs_alone_up_to_the_most(lib, limits):
    """A busy process that stays: each try after a fallback strikes at once, and the fallback
    doubles until it reaches the most, where it stays: one job on threads every ``most``."""
    first, most, _ = limits
    solo = _solo_after(lib, [LOST] * 12)
    expect, n = [0], first
    while len(expect) < 12:
        expect.append(n)
        n = min(2 * n, most)
    assert solo == expect and solo[-1] == most


def test_clean_jobs_halve_the_backoff_and_contention_that_passes_costs_the_first_fallback(
        lib, limits):
    """Contention that passes (a prefill's products beside torch's spinning workers): after its
    fallback the tries run clean, and the next contention starts again from the first length
    after enough clean jobs, with two strikes in a row again."""
    first, most, _ = limits
    # grown to 4 x first, then clean: halved twice back to first, once more to none
    solo = _solo_after(lib, [LOST, LOST, LOST, LOST] + [QUIET] * 3 + [LOST, LOST])
    assert solo[:4] == [0, first, 2 * first, 4 * first]
    assert solo[4:7] == [0, 0, 0]
    assert solo[7:] == [0, first]  # forgotten: two strikes in a row again, from the first
    # one clean job between tries only halves it: the next strike doubles it back
    solo = _solo_after(lib, [LOST, LOST, LOST, QUIET, LOST])
    assert solo == [0, first, 2 * first, 0, 2 * first]


@pytest.mark.slow
def test_beside_busy_processes_the_pool_falls_back_and_results_stay_the_same(lib, tmp_path):
    """As many busy processes as the machine has cores, so two pool threads cannot both run:
    120 decode steps of 16 rows on two threads leave the guard fallen back at least once (the
    pool's counters), and every step's logits equal the one-thread runner's bit for bit. The
    model is the benchmark target's width on 4 layers (a step of a few ms: on a tiny model a
    step ends before a late thread wakes, and the caller alone does it). Slow (it loads every
    core) and dependent on the OS's scheduling: a guard that never falls back under full load
    fails it."""
    from benchmarks.factory import Sizes, build_models
    from benchmarks.oversubscribed import pool_stats
    from metagen.engine.kv_cache import KVCache
    from metagen.engine.model_runner import ExtendRequest, ModelRunner
    from metagen.engine.models.loader import load_model

    sizes = Sizes(layers=4, vocab=4000, draft_layers=1, max_positions=256)
    model = load_model(build_models(tmp_path, sizes)["target"])
    cfg = model.cfg
    runners = []
    for threads in (1, 2):
        kv = KVCache(cfg.num_layers, 40, 16, cfg.num_kv_heads, cfg.head_dim, torch.float32, "cpu")
        runner = ModelRunner(model, kv, hydragen=True)
        assert runner.native is not None
        runner.native.threads = threads
        runner.extend([ExtendRequest([0, 1], 0, list(range(3, 35)))])  # a 32-token prompt
        runners.append(runner)
    reqs = [ExtendRequest([0, 1, 2 + r], 32, [5 + r]) for r in range(16)]
    fallbacks = pool_stats()[2]
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(os.cpu_count() or 2)]
    try:
        for _ in range(120):
            one, two = (r.extend(reqs) for r in runners)
            assert all(torch.equal(a, b) for a, b in zip(one, two))
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert pool_stats()[2] > fallbacks
