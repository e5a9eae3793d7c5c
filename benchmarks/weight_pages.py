"""Weights on 4 KiB pages against weights on huge pages: a plain streaming read and the
benchmark target's float32 products, per thread count and row count.

- read: ``benchmarks/native/read_probe.c`` sums a ``--mbytes`` buffer (four vector chains per
  thread, the threads splitting it as the products split their columns): what one or two cores
  stream here, the roofline the one-row products chase. On a buffer of plain pages and on a
  :class:`~metagen.engine.models.weight_arena.WeightArena` (huge pages where the OS grants them).
- products: one step's 33 products of the target (``benchmarks.small_matmul.SHAPES``) by the
  native kernel, with the weights as separate tensors (the loader before the arena) and in one
  arena (the loader now); ``rows_M_int8``: the same on the weights quantized to int8 with
  per-channel scales (``quantization="int8"``, 42 MB a step), separate and in an int8 arena.

Ways run interleaved, ``--rounds`` times; each time is the process's CPU time over the thread
count (so other processes' time slices are not counted) and the wall time. The table gives
medians, GB/s of weights read, and the per-round ratio (plain / arena) median and range.

``python -m benchmarks.weight_pages [--isa native|avx2] [--threads 1,2] [--rows 1,16]
[--rounds 21] [--mbytes 256] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import torch

from benchmarks.small_matmul import SHAPES, kernel_for
from metagen.engine.models.int8 import quantize_int8
from metagen.engine.models.weight_arena import WeightArena
from metagen.engine.native.int8_matmul import load_from as load_int8_from
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, build
from metagen.engine.native.cpu import cpu_model

_NATIVE = Path(__file__).resolve().parents[1] / "metagen" / "engine" / "native"
_PROBE = Path(__file__).resolve().parent / "native" / "read_probe.c"


def read_probe(isa: str) -> Callable[[torch.Tensor, int], float]:
    """The streaming read of ``read_probe.c`` built for ``isa``: ``probe(buffer, threads)``
    reads the float32 ``buffer`` on ``threads`` threads and returns its sum."""
    flags = (NATIVE_FLAGS if isa == "native" else AVX2_FLAGS) + (f"-I{_NATIVE}",)
    lib = ctypes.CDLL(str(build([_PROBE, _NATIVE / "pool.c"], flags)))
    fn = lib.mg_read_probe
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int]
    out = torch.empty(64)

    def probe(buf: torch.Tensor, threads: int) -> float:
        out.zero_()
        fn(buf.data_ptr(), buf.numel(), out.data_ptr(), threads)
        return float(out.sum())
    return probe


def _thp_mode() -> str:
    try:
        return Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        return "unknown"


def _time(ways: Mapping[str, Callable[[], object]], rounds: int, threads: int
          ) -> dict[str, dict[str, list[float]]]:
    """Each way's CPU and wall milliseconds per round, the ways interleaved in every round."""
    times: dict[str, dict[str, list[float]]] = {w: {"cpu": [], "wall": []} for w in ways}
    for fn in ways.values():
        fn()  # warm up
    for _ in range(rounds):
        for name, fn in ways.items():
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            times[name]["cpu"].append((time.process_time() - c0) * 1e3 / threads)
            times[name]["wall"].append((time.perf_counter() - w0) * 1e3)
    return times


def _summary(times: dict[str, dict[str, list[float]]], nbytes: int) -> dict[str, Any]:
    plain, arena = times["plain"], times["arena"]
    out: dict[str, Any] = {"times_ms": times}
    for clock in ("cpu", "wall"):
        ratios = sorted(p / a for p, a in zip(plain[clock], arena[clock]))
        out[clock] = {
            "median_ms": {w: statistics.median(t[clock]) for w, t in times.items()},
            "gb_s": {w: nbytes / statistics.median(t[clock]) / 1e6 for w, t in times.items()},
            "ratio_median": statistics.median(ratios), "ratio_range": [ratios[0], ratios[-1]]}
    return out


def measure(isa: str, threads: int, rows: list[int], rounds: int, mbytes: int
            ) -> dict[str, Any]:
    torch.set_num_threads(threads)
    probe = read_probe(isa)
    n = mbytes * (1 << 20) // 4
    bufs = {"plain": torch.ones(n), "arena": WeightArena([(n,)]).take((n,)).fill_(1.0)}
    # cast: mypy cannot infer a lambda with a default argument against Callable[[], object]
    result: dict[str, Any] = {"read": _summary(_time(
        {w: cast("Callable[[], object]", lambda b=b: probe(b, threads)) for w, b in bufs.items()},
        rounds, threads), 4 * n)}
    del bufs
    kernel = kernel_for(isa)
    assert kernel is not None, "no native kernel on this machine"
    g = torch.Generator().manual_seed(0)
    plain = [torch.randn(k, m, generator=g) * 0.02 for k, m in SHAPES]
    arena = WeightArena([w.shape for w in plain])
    in_arena = [arena.take(w.shape).copy_(w) for w in plain]
    nbytes = sum(w.numel() for w in plain) * 4
    for m in rows:
        xs = [torch.randn(m, k, generator=g) for k, _ in SHAPES]
        ways = {w: (lambda ws=ws: [kernel(x, w, threads=threads) for x, w in zip(xs, ws)])
                for w, ws in (("plain", plain), ("arena", in_arena))}
        result[f"rows_{m}"] = _summary(_time(ways, rounds, threads), nbytes)
    int8 = load_int8_from(NATIVE_FLAGS if isa == "native" else AVX2_FLAGS)
    q8 = [quantize_int8(w.t()) for w in plain]
    q8_arena = WeightArena([q.shape for q, _ in q8], torch.int8)
    q8_in_arena = [(q8_arena.take(q.shape).copy_(q), s) for q, s in q8]
    for m in rows:
        xs = [torch.randn(m, k, generator=g) for k, _ in SHAPES]
        ways = {w: (lambda qs=qs: [int8(x, q, s, threads=threads) for x, (q, s) in zip(xs, qs)])
                for w, qs in (("plain", q8), ("arena", q8_in_arena))}
        result[f"rows_{m}_int8"] = _summary(_time(ways, rounds, threads), nbytes // 4)
    result["huge_pages_granted"] = arena.huge and q8_arena.huge
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rows", default="1,16")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--mbytes", type=int, default=256)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    result: dict[str, Any] = {
        "argv": argv, "date": datetime.date.today().isoformat(),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores", "thp": _thp_mode(),
        "isa": args.isa, "load_before": os.getloadavg(), "by_threads": {}}
    for t in (int(x) for x in args.threads.split(",")):
        r = measure(args.isa, t, rows, args.rounds, args.mbytes)
        result["by_threads"][str(t)] = r
        print(f"{args.isa}, {t} thread(s): GB/s by CPU time (wall) plain -> arena; "
              "plain/arena per round: median (range)")
        for what, s in r.items():
            if isinstance(s, dict):
                c, w = s["cpu"], s["wall"]
                print(f"  {what:11s} {c['gb_s']['plain']:6.2f} ({w['gb_s']['plain']:5.2f}) -> "
                      f"{c['gb_s']['arena']:6.2f} ({w['gb_s']['arena']:5.2f})  "
                      f"{c['ratio_median']:.3f} ({c['ratio_range'][0]:.2f}-"
                      f"{c['ratio_range'][1]:.2f})")
    result["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
