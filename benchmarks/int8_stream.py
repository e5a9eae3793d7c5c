"""How fast the int8 products stream their weights: GB/s of weight bytes read per second by the
weight-only int8 kernel (``int8_matmul.c``), the int8-activation one (``q8_act.c``, w8a8) and the
float32 small-row kernel (``small_matmul.c``), against a plain read of the same int8 bytes
(torch's int64 sum over them: no arithmetic worth the name, so about what one core can pull from
memory), on the benchmark target's products.

One "step" is every projection of the 8-layer target plus its head (``benchmarks.small_matmul``'s
shapes), each weight distinct, so a step streams 42 MB of int8 (167 MB of float32) from memory as
decoding does. Per row count the ways run interleaved, ``--repeats`` rounds (the int8 ways after
the plain read, their order reversed every other round); a way's time is the
median over rounds, its rate the weight bytes over that time. At one thread every time is the
calling thread's CPU time (``time.thread_time``: a machine shared with other jobs takes time
slices that wall time would count; their pressure on the memory bus still shows); at several,
wall time.

``--baseline DIR`` also runs the int8 kernels built from the C files in DIR (an older version:
``git archive REV metagen/engine/native | tar -x -C DIR --strip-components 3``) with the same
flags, interleaved, and gives each round's ratio baseline / new (median and range).
``--isa avx2`` builds the AVX2 path explicitly (to measure it on an AVX-512 machine).
``--resident`` makes every product of the step the first one (qkv, 512 x 1536: 786 KB of int8,
held in L2), so the int8 rates are what the kernels compute when memory is not in the way.

    python -m benchmarks.int8_stream [--isa native|avx2] [--rows 1,16] [--threads 1]
                                     [--repeats 15] [--baseline DIR] [--resident]
                                     [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.small_matmul import SHAPES
from metagen.engine.models.int8 import quantize_int8
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, build
from metagen.engine.native.cpu import cpu_model
from metagen.engine.native.int8_matmul import Int8Matmul
from metagen.engine.native.library import SOURCES, open_library
from metagen.engine.native.small_matmul import SmallMatmul

READ, F32 = "plain read", "float32 kernel"
Q8, A8 = "int8 kernel", "w8a8 kernel"


def _int8_kernel(flags: tuple[str, ...], sources: Path | None) -> Int8Matmul:
    if sources is None:
        return Int8Matmul(open_library(flags))
    lib = ctypes.CDLL(str(build([sources / p.name for p in SOURCES], flags)))
    lib.mg_isa.restype = ctypes.c_int
    return Int8Matmul(lib)


def _step(kernel: Int8Matmul, xs: list[torch.Tensor],
          weights: list[tuple[torch.Tensor, torch.Tensor]], act8: bool) -> Callable[[], object]:
    return lambda: [kernel(x, q, s, quantize_activations=act8) for x, (q, s) in zip(xs, weights)]


def measure(rows: list[int], repeats: int, threads: int, flags: tuple[str, ...],
            baseline: Path | None = None, resident: bool = False,
            shapes: list[tuple[int, int]] = SHAPES) -> list[dict[str, Any]]:
    """Per row count: each way's median milliseconds per step and GB/s of the weight bytes it
    reads (int8 for the int8 ways and the plain read, float32 for the float32 kernel), and with
    ``baseline`` each round's baseline / new time ratio per int8 kernel. ``resident``: every
    product is the first one, on the same weight. ``shapes``: the products' (in, out), each
    ``in`` a multiple of 8 (the plain read sums int64 words)."""
    torch.set_num_threads(threads)
    clock = time.thread_time if threads == 1 else time.perf_counter
    new = _int8_kernel(flags, None)
    old = _int8_kernel(flags, baseline) if baseline else None
    f32 = SmallMatmul(open_library(flags))
    g = torch.Generator().manual_seed(0)
    w_in_out = [torch.randn(k, n, generator=g) * 0.02 for k, n in shapes]
    if resident:
        w_in_out = [w_in_out[0]] * len(shapes)
    w_int8 = [quantize_int8(w.t().contiguous()) for w in w_in_out]
    if resident:
        w_int8 = [w_int8[0]] * len(shapes)
    int8_bytes = sum(q.numel() for q, _ in w_int8)
    f32_bytes = 4 * int8_bytes
    out = []
    for m in rows:
        xs = [torch.randn(m, w.shape[0], generator=g) for w in w_in_out]
        ways: dict[str, Callable[[], object]] = {
            F32: lambda: [f32(x, w) for x, w in zip(xs, w_in_out)],
            READ: lambda: [q.view(torch.int64).sum() for q, _ in w_int8]}
        kernels = {"": new, "baseline ": old} if old else {"": new}
        for tag, k in kernels.items():
            ways[tag + Q8] = _step(k, xs, w_int8, False)
            ways[tag + A8] = _step(k, xs, w_int8, True)
        times: dict[str, list[float]] = {name: [] for name in ways}
        int8_ways = list(ways)[2:]
        for rnd in range(repeats):
            # every int8 way follows one that read the same int8 bytes (the 42 MB nearly fit the
            # L3: a way right after the float32 one would find none of them left there), new
            # and baseline in turn first
            for name in [F32, READ, *(int8_ways if rnd % 2 == 0 else int8_ways[::-1])]:
                t0 = clock()
                ways[name]()
                times[name].append((clock() - t0) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        row: dict[str, Any] = {
            "rows": m, "median_ms": med,
            "gb_per_s": {name: (f32_bytes if name == F32 else int8_bytes) / ms / 1e6
                         for name, ms in med.items()}}
        if old:
            for name in (Q8, A8):
                r = [b / n for b, n in zip(times["baseline " + name], times[name])]
                row[f"{name}: baseline / new"] = {"median": statistics.median(r),
                                                  "min": min(r), "max": max(r)}
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--baseline", type=Path, default=None)
    ap.add_argument("--resident", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    flags = NATIVE_FLAGS if args.isa == "native" else AVX2_FLAGS
    rows = measure([int(r) for r in args.rows.split(",")], args.repeats, args.threads, flags,
                   args.baseline, args.resident)
    print(f"{args.isa} build, {args.threads} thread(s), {cpu_model()}"
          f"{', resident weight' if args.resident else ''}: median ms per step "
          "(GB/s of the weight bytes)")
    for r in rows:
        print(f"rows {r['rows']}: " + "; ".join(
            f"{name} {ms:.2f} ({r['gb_per_s'][name]:.1f})" for name, ms in r["median_ms"].items()))
        for name in (Q8, A8):
            if f"{name}: baseline / new" in r:
                q = r[f"{name}: baseline / new"]
                print(f"  {name} baseline / new per round: median {q['median']:.2f}, "
                      f"range {q['min']:.2f}-{q['max']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"argv": argv, "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
             "isa": args.isa, "build_flags": list(flags), "threads": args.threads,
             "repeats": args.repeats, "baseline": str(args.baseline) if args.baseline else None,
             "resident": args.resident,
             "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
