"""The one-row int8 products' own speed, old against new: one decode step's products of the
benchmark target (``benchmarks.small_matmul.SHAPES``, 42 MB of int8) in one C call
(``benchmarks/native/int8_step_probe.c``, no Python per product), by the weight-only kernel
(``int8_matmul.c``) and the w8a8 one (``q8_act.c``), each built from this checkout's C files and
from ``--baseline DIR``'s (``git archive REV metagen/engine/native | tar -x -C DIR
--strip-components 3``) with the same flags, against a plain read of as many bytes
(``benchmarks/native/read_probe.c``).

Ways run interleaved (the int8 ways' order reversed every other round), ``--repeats`` rounds; at
one thread each time is the calling thread's CPU time, at several wall time. ``--resident``
makes every product the first one on the same weight (786 KB, in L2): the rate the kernels
compute at with memory out of the way. Gives median ms, GB/s of weight bytes, and per round
baseline / new.

    python -m benchmarks.int8_row --baseline DIR [--isa native|avx2] [--threads 1]
                                  [--repeats 21] [--resident] [--json PATH]
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
from typing import Any, cast

import torch

from benchmarks.small_matmul import SHAPES
from benchmarks.weight_pages import read_probe
from metagen.engine.models.int8 import quantize_int8
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, build
from metagen.engine.native.cpu import cpu_model

_NATIVE = Path(__file__).resolve().parents[1] / "metagen" / "engine" / "native"
_PROBE = Path(__file__).resolve().parent / "native" / "int8_step_probe.c"
_KERNELS = ("int8_matmul.c", "q8_act.c", "pool.c")


def _probe(flags: tuple[str, ...], sources: Path) -> Callable[..., int]:
    lib = ctypes.CDLL(str(build([_PROBE, *(sources / f for f in _KERNELS)],
                                flags + (f"-I{sources}",))))
    fn = lib.mg_int8_step_probe
    fn.restype = ctypes.c_int
    p, i = ctypes.c_void_p, ctypes.c_int64
    fn.argtypes = [p, p, p, p, p, i, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    return fn


def measure(isa: str, baseline: Path, threads: int, repeats: int, resident: bool,
            shapes: list[tuple[int, int]] = SHAPES) -> dict[str, Any]:
    """Each way's median ms per step and GB/s of the weight bytes, and per int8 kernel each
    round's baseline / new time ratio (median, min, max). ``shapes``: the products' (in, out),
    the read's bytes a multiple of 4 (a float32 buffer)."""
    flags = NATIVE_FLAGS if isa == "native" else AVX2_FLAGS
    probes = {"": _probe(flags, _NATIVE), "baseline ": _probe(flags, baseline)}
    read = read_probe(isa)
    shapes = [shapes[0]] * len(shapes) if resident else shapes
    g = torch.Generator().manual_seed(0)
    ws = [quantize_int8(torch.randn(n, k, generator=g) * 0.02)
          for k, n in (shapes[:1] if resident else shapes)]
    w = torch.cat([q.flatten() for q, _ in ws])
    s = torch.cat([sc for _, sc in ws] * (len(shapes) if resident else 1))
    x = torch.randn(sum(k for k, _ in shapes), generator=g)
    y = torch.empty(sum(n for _, n in shapes))
    dims = torch.tensor([d for shape in shapes for d in shape], dtype=torch.int64)
    nbytes = sum(k * n for k, n in shapes)
    buf = torch.randn(ws[0][0].numel() // 4 if resident else nbytes // 4, generator=g)
    reps = len(shapes) if resident else 1
    ways: dict[str, Callable[[], object]] = {
        "plain read": lambda: [read(buf, threads) for _ in range(reps)]}
    for tag, fn in probes.items():
        for act8, name in ((0, "int8"), (1, "w8a8")):
            # cast: mypy cannot infer a lambda with default arguments against this Callable
            ways[tag + name] = cast("Callable[[], object]", lambda fn=fn, act8=act8: fn(
                x.data_ptr(), w.data_ptr(), s.data_ptr(), y.data_ptr(), dims.data_ptr(),
                len(shapes), act8, threads, int(resident)))
    clock = time.thread_time if threads == 1 else time.perf_counter
    times: dict[str, list[float]] = {name: [] for name in ways}
    kernels = list(ways)[1:]
    for rnd in range(repeats):
        for name in ["plain read", *(kernels if rnd % 2 == 0 else kernels[::-1])]:
            t0 = clock()
            ways[name]()
            times[name].append((clock() - t0) * 1e3)
    med = {name: statistics.median(t) for name, t in times.items()}
    out: dict[str, Any] = {"median_ms": med,
                           "gb_per_s": {name: nbytes / ms / 1e6 for name, ms in med.items()}}
    for name in ("int8", "w8a8"):
        r = [b / n for b, n in zip(times["baseline " + name], times[name])]
        out[f"{name}: baseline / new"] = {"median": statistics.median(r), "min": min(r),
                                          "max": max(r)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--resident", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    r = measure(args.isa, args.baseline, args.threads, args.repeats, args.resident)
    print(f"{args.isa} build, {args.threads} thread(s), {cpu_model()}"
          f"{', resident weight' if args.resident else ''}, one row: median ms per step (GB/s)")
    print("; ".join(f"{name} {ms:.2f} ({r['gb_per_s'][name]:.1f})"
                    for name, ms in r["median_ms"].items()))
    for name in ("int8", "w8a8"):
        q = r[f"{name}: baseline / new"]
        print(f"  {name} baseline / new per round: median {q['median']:.2f}, "
              f"range {q['min']:.2f}-{q['max']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"argv": argv, "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
             "isa": args.isa, "threads": args.threads, "repeats": args.repeats,
             "baseline": str(args.baseline), "resident": args.resident, **r}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
