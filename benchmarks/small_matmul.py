"""Products of a few rows: MKL (``x @ W`` over ``(in, out)``, ``F.linear`` over ``(out, in)``)
against metagen's native kernel, on the benchmark target's shapes, per ISA and thread count.

One "step" is every projection of the 8-layer target plus its head, each weight distinct (so
every step streams 167 MB from memory, as decoding does). Per row count M the ways run
interleaved, ``--repeats`` times; the table gives each way's median (and best) milliseconds and
the kernel's speedup over ``x @ W`` (medians), which is what the engine would use without it.

``--isa avx2`` builds the kernel's AVX2 path explicitly (to measure it on an AVX-512 machine)
and re-runs this script with ``MKL_ENABLE_INSTRUCTIONS=AVX2``, so MKL is held to the same ISA.
``--table PATH`` records the dispatch rule the measurement supports
(:func:`metagen.engine.native.dispatch.rule_from`) into that JSON, replacing the table of the
same ISA and machine class (:func:`metagen.cpuinfo.cpu_class`); the shipped one is
``metagen/engine/native/dispatch_tables.json``.

``--baseline DIR`` also times the kernels built from the C files in DIR (an older version:
``git archive REV metagen/engine/native | tar -x -C /tmp/old``), for before/after ratios.

``python -m benchmarks.small_matmul [--isa native|avx2] [--rows 1,2,4] [--threads 1,default]
[--json PATH] [--table PATH] [--baseline DIR]``.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.thread_counts import thread_counts
from metagen.engine.models.int8 import quantize_int8
from metagen.engine.native.int8_matmul import Int8Matmul
from metagen.engine.native.int8_matmul import load as load_int8_matmul
from metagen.engine.native import SmallMatmul, dispatch, load_small_matmul
from metagen.engine.native import small_matmul as sm
from metagen.engine.native.build import AVX2_FLAGS, NATIVE_FLAGS, build
from metagen.engine.native.cpu import cpu_class, cpu_model
from metagen.engine.native.library import SOURCES

HIDDEN, FFN, VOCAB, LAYERS = 512, 1376, 32000, 8  # the benchmark target (benchmarks/factory.py)
SHAPES = [(HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 2 * FFN), (FFN, HIDDEN)] * LAYERS + [
    (HIDDEN, VOCAB)]  # (in, out) of qkv, o, gate_up, down per layer, then the head
MKL = "x @ W (in, out)"
NATIVE = "native kernel"
BASELINE = "baseline kernel"
INT8 = "int8 kernel"
DEFAULT_ROWS = ",".join(map(str, [*range(1, 17), 24, 32]))


def kernel_for(isa: str, sources: Path | None = None) -> SmallMatmul | None:
    """``native``: this machine's kernel (None where it has none); ``avx2``: the AVX2 build.
    ``sources``: built from the C files in that folder instead (another version of them)."""
    flags = NATIVE_FLAGS if isa == "native" else AVX2_FLAGS
    if sources is not None:
        lib = ctypes.CDLL(str(build([sources / p.name for p in SOURCES], flags)))
        lib.mg_isa.restype = ctypes.c_int
        return SmallMatmul(lib)
    return load_small_matmul() if isa == "native" else sm.load_from(flags)


def measure(rows: list[int], repeats: int = 7, threads: int = 1,
            kernel: SmallMatmul | None = None,
            baseline: SmallMatmul | None = None,
            int8: Int8Matmul | None = None) -> list[dict[str, Any]]:
    """Per row count: each way's median and best milliseconds per step (``median`` and ``best``
    dicts keyed by way) and the kernel's median speedup over ``x @ W`` (and the ``baseline``
    kernel's, when given), torch (and so the kernels) on ``threads`` threads. With ``int8``, also
    the same step on the weights quantized to int8 with per-channel scales (``int8 kernel``:
    ``EngineConfig(quantization="int8")``, 42 MB a step instead of 167)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    w_in_out = [torch.randn(k, n, generator=g) * 0.02 for k, n in SHAPES]
    w_out_in = [w.t().contiguous() for w in w_in_out]
    w_int8 = [quantize_int8(w) for w in w_out_in] if int8 is not None else []
    out = []
    for m in rows:
        xs = [torch.randn(m, k, generator=g) for k, _ in SHAPES]
        ways: dict[str, Callable[[], object]] = {
            MKL: lambda: [torch.mm(x, w) for x, w in zip(xs, w_in_out)],
            "F.linear (out, in)": lambda: [F.linear(x, w) for x, w in zip(xs, w_out_in)]}
        if kernel is not None:
            ways[NATIVE] = lambda: [kernel(x, w) for x, w in zip(xs, w_in_out)]
        if baseline is not None:
            ways[BASELINE] = lambda: [baseline(x, w) for x, w in zip(xs, w_in_out)]
        if int8 is not None:
            ways[INT8] = lambda: [int8(x, q, sc) for x, (q, sc) in zip(xs, w_int8)]
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(repeats):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
        med = {name: statistics.median(t) for name, t in times.items()}
        row: dict[str, Any] = {"rows": m, "median": med,
                               "best": {name: min(t) for name, t in times.items()}}
        if kernel is not None:
            row["speedup"] = med[MKL] / med[NATIVE]
        if baseline is not None:
            row["baseline_speedup"] = med[MKL] / med[BASELINE]
        out.append(row)
    return out


def table_entry(result: dict[str, Any]) -> dict[str, Any]:
    """The dispatch table this result supports: the ISA, the CPU, the rule per thread count."""
    by_threads = {}
    for t, rows in result["by_threads"].items():
        speedup = {r["rows"]: round(r["speedup"], 3) for r in rows}
        rule = dispatch.rule_from(speedup)
        by_threads[t] = {"lowest": rule.lowest, "highest": rule.highest, "speedup": speedup}
    return {"isa": result["kernel_isa"], "cpu": result["cpu"], "class": result["class"],
            "machine": result["machine"],
            "build_flags": result["build_flags"], "mkl_instructions": result["mkl_instructions"],
            "date": result["date"], "repeats": result["repeats"],
            "command": "python -m benchmarks.small_matmul " + " ".join(result["argv"]),
            "by_threads": by_threads}


def merge_table(path: Path, entry: dict[str, Any]) -> None:
    """Put ``entry`` into the tables at ``path`` (created if missing), replacing the one of the
    same ISA and machine class (a table without a class: of the same CPU model name)."""
    tables = json.loads(path.read_text())["tables"] if path.exists() else []
    tables = [t for t in tables if (t["isa"], t.get("class", t["cpu"]))
              != (entry["isa"], entry["class"])]
    tables.append(entry)
    tables.sort(key=lambda t: (-t["isa"], t["cpu"], t.get("class", "")))
    path.write_text(json.dumps({"tables": tables}, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--rows", default=DEFAULT_ROWS)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", default="1,default", help="thread counts, 'default': torch's")
    ap.add_argument("--machine", default="", help="free text recorded with the table")
    ap.add_argument("--json", default=None)
    ap.add_argument("--table", default=None, help="dispatch tables JSON to record into")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a folder with other versions of the kernels' C files (e.g. from `git "
                         "archive`), built with the same flags and timed interleaved as well")
    args = ap.parse_args(argv)
    if args.isa == "avx2" and os.environ.get("MKL_ENABLE_INSTRUCTIONS") != "AVX2":
        env = {**os.environ, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}  # read when MKL loads: re-run
        os.execve(sys.executable, [sys.executable, "-m", "benchmarks.small_matmul", *argv], env)
    kernel = kernel_for(args.isa)
    baseline = kernel_for(args.isa, args.baseline) if args.baseline else None
    rows = [int(r) for r in args.rows.split(",")]
    result: dict[str, Any] = {
        "argv": argv, "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
        "class": cpu_class(), "machine": args.machine or f"{cpu_model()}, {os.cpu_count()} cores",
        "build_flags": list(AVX2_FLAGS if args.isa == "avx2" else NATIVE_FLAGS),
        "mkl_instructions": os.environ.get("MKL_ENABLE_INSTRUCTIONS", "default"),
        "kernel_isa": kernel.isa if kernel else None, "repeats": args.repeats,
        "baseline": str(args.baseline) if args.baseline else None,
        "by_threads": {}}
    for threads in thread_counts(args.threads):
        ms = measure(rows, args.repeats, threads, kernel, baseline,
                     load_int8_matmul() if args.isa == "native" else None)
        result["by_threads"][str(threads)] = ms
        ways = list(ms[0]["median"])
        print(f"{args.isa} kernel (isa {result['kernel_isa']}), {threads} thread(s), "
              f"{result['cpu']}, MKL {result['mkl_instructions']}; median (best) ms per step")
        print("rows | " + " | ".join(ways) + " | kernel (baseline) speedup over x @ W")
        for r in ms:
            speed = f"{r['speedup']:.2f}x" if "speedup" in r else "-"
            if "baseline_speedup" in r:
                speed += f" ({r['baseline_speedup']:.2f}x)"
            print(f"{r['rows']} | " + " | ".join(f"{r['median'][w]:.1f} ({r['best'][w]:.1f})"
                                               for w in ways) + f" | {speed}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    if args.table and kernel is not None and baseline is None:
        entry = table_entry(result)
        merge_table(Path(args.table), entry)
        print("recorded: " + ", ".join(f"{t} thread(s): rows {r['lowest']}-{r['highest']}"
                                       for t, r in entry["by_threads"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
