"""Workload B's attention alone: sixteen rows, one new token each, sharing a 512-token prompt
(one Hydragen group), over the benchmark target's 8 layers (8 kv heads of 64), each layer its
own float32 cache, with the caches pushed out of L2 before every pass (a decode step meets them
there after streaming its weights).

``--baseline DIR`` times the native library built from the C files in DIR too (an older version:
``git archive REV metagen/engine/native | tar -x -C /tmp/old``); the two run interleaved, one
pass each per round, and the table gives each one's median milliseconds per pass (8 layers),
wall clock and CPU time of the process (all its threads: on a loaded machine the steadier
measure of work), and the range of the per-round ratios. ``--isa avx2`` builds both with the
AVX2 path.

``python -m benchmarks.group_attention [--baseline DIR] [--isa native|avx2] [--threads 1,2]
[--rounds N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from pathlib import Path

import torch

from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, build
from metagen.engine.native.cpu import cpu_model
from metagen.engine.native.decode_step import StepPlan, _Model, _plan_struct
from metagen.engine.native.library import SOURCES

ROWS, PREFIX, BLOCK, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 16, 512, 16, 8, 8, 8, 64
_P, _I = ctypes.c_void_p, ctypes.c_int64


def attention_fn(sources: list[Path], flags: tuple[str, ...]):
    """``mg_attention`` of the native library built from ``sources`` with ``flags``."""
    lib = ctypes.CDLL(str(build(sources, flags)))
    fn = lib.mg_attention
    fn.restype = ctypes.c_int
    fn.argtypes = [_P, _P, _P, _I, _P, _P, _P, ctypes.c_int]
    return fn


def attention_ways(baseline: Path | None, isa: str) -> dict:
    """``mg_attention`` of this checkout's C files, and of ``baseline``'s (a folder of them)
    where given, both built with ``isa``'s flags ("native" or "avx2")."""
    flags = AVX2_FLAGS if isa == "avx2" else NATIVE_FLAGS
    ways = {"this checkout": attention_fn(list(SOURCES), flags)}
    if baseline:
        ways["baseline"] = attention_fn([baseline / s.name for s in SOURCES], flags)
    return ways


def _setup():
    """The plan, queries and 8 layers' caches: the prompt's blocks shared, one own block each."""
    nblk = PREFIX // BLOCK
    g = torch.Generator().manual_seed(0)
    caches = [tuple(torch.randn(nblk + ROWS, BLOCK, KV_HEADS, HEAD_DIM, generator=g)
                    for _ in range(2)) for _ in range(LAYERS)]
    tables = [list(range(nblk)) + [nblk + r] for r in range(ROWS)]
    plan = StepPlan.build(BLOCK, tables, [PREFIX] * ROWS, [1] * ROWS, [(list(range(ROWS)), nblk)])
    q = torch.randn(ROWS, HEADS, HEAD_DIM, generator=g)
    return plan, q, caches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--warm", action="store_true", help="no flush: the caches stay in L2/L3")
    a = ap.parse_args()
    torch.set_num_threads(1)  # the flush between passes must not leave OpenMP workers spinning
    ways = attention_ways(a.baseline, a.isa)
    plan, q, caches = _setup()
    model = _Model(HEADS * HEAD_DIM, HEADS, KV_HEADS, HEAD_DIM, 0, LAYERS, 1e-5,
                   HEAD_DIM ** -0.5, None, None)
    plan_c = _plan_struct(plan)
    out = torch.empty(ROWS, HEADS, HEAD_DIM)
    flush = torch.ones(64 << 20 // 4)  # 64 MB: evicts the caches from L2 (and most of L3)
    results = []
    for threads in map(int, a.threads.split(",")):
        times: dict[str, list[float]] = {w: [] for w in ways}
        cpu: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(a.rounds):
            for way, fn in ways.items():
                if not a.warm:
                    flush.add_(1.0)
                t0, c0 = time.perf_counter(), time.process_time()
                for kc, vc in caches:
                    assert fn(ctypes.byref(model), ctypes.byref(plan_c), q.data_ptr(),
                              q.stride(0), out.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                              threads) == 0
                times[way].append((time.perf_counter() - t0) * 1e3)
                cpu[way].append((time.process_time() - c0) * 1e3)
        row: dict[str, float | int] = {"threads": threads}
        for label, ms in (("wall", times), ("cpu", cpu)):
            row |= {f"{label} ms {w}": statistics.median(t) for w, t in ms.items()}
            if a.baseline:
                ratios = [b / n for b, n in zip(ms["baseline"], ms["this checkout"])]
                row |= {f"{label} speedup median": statistics.median(ratios),
                        f"{label} speedup min": min(ratios), f"{label} speedup max": max(ratios)}
        results.append(row)
        print(json.dumps(row))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"cpu": cpu_model(), "isa": a.isa, "rounds": a.rounds,
                                      "rows": ROWS, "prefix": PREFIX, "layers": LAYERS,
                                      "results": results}, indent=1))


if __name__ == "__main__":
    main()
