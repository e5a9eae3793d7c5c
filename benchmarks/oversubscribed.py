"""Decode steps on a machine with fewer free cores than threads: the native step (and its head)
at one thread and at two, interleaved, with and without busy processes beside them.

    python -m benchmarks.oversubscribed [--busy 0,1] [--steps 40] [--scenarios AB] [--json PATH]

Each scenario is ``benchmarks.decode_step``'s (A: one row after 256 positions; B: sixteen rows
sharing 512) through the engine's ModelRunner, so a step is the native decode step plus the LM
head. For each count of busy processes (``python -c 'while True: pass'``, started here and
stopped by their pids), steps alternate between one thread and two; the table gives each
one's median and 90th percentile (ms), and the native pool's counters over the run (jobs on
several threads, jobs its oversubscription guard ran on the caller alone, and how often it fell
back: ``mg_pool_stats``). Reported, never asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.decode_step import SCENARIOS, _setup
from benchmarks.factory import build_models, models_dir
from metagen.engine.models.loader import load_model
from metagen.engine.native.library import library


def pool_stats() -> list[int]:
    """The native pool's counters: threaded jobs, jobs run alone by the guard, fallbacks."""
    out = (ctypes.c_int64 * 3)()
    lib = library()
    if lib is None:
        return [0, 0, 0]
    lib.mg_pool_stats(out)
    return list(out)


def measure(busy: int, steps: int, scenarios: str, model: Any) -> list[dict[str, Any]]:
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(busy)]
    rows = []
    try:
        for name, (n_rows, prompt, tokens) in SCENARIOS.items():
            if name[0] not in scenarios:
                continue
            runner, reqs = _setup(model, n_rows, prompt, True, tokens)
            before = pool_stats()
            ms: dict[int, list[float]] = {1: [], 2: []}
            for i in range(steps):
                for threads in ((1, 2) if i % 2 else (2, 1)):
                    torch.set_num_threads(threads)
                    t0 = time.perf_counter()
                    runner.extend(reqs)
                    ms[threads].append((time.perf_counter() - t0) * 1e3)
            after = pool_stats()
            row: dict[str, Any] = {"scenario": name, "busy": busy,
                                   "pool": [a - b for a, b in zip(after, before)]}
            for threads, ts in ms.items():
                ts.sort()
                row[f"t{threads}_median_ms"] = statistics.median(ts)
                row[f"t{threads}_p90_ms"] = ts[int(0.9 * len(ts))]
            rows.append(row)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--busy", default="0,1", help="counts of busy processes to run beside")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--scenarios", default="AB")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    model = load_model(build_models(models_dir())["target"])
    rows = [r for b in args.busy.split(",")
            for r in measure(int(b), args.steps, args.scenarios, model)]
    print("scenario | busy | 1 thread median (p90) ms | 2 threads median (p90) ms | "
          "2 / 1 | pool: threaded, alone, fallbacks")
    for r in rows:
        print(f"{r['scenario']} | {r['busy']} | {r['t1_median_ms']:.1f} ({r['t1_p90_ms']:.1f}) | "
              f"{r['t2_median_ms']:.1f} ({r['t2_p90_ms']:.1f}) | "
              f"{r['t2_median_ms'] / r['t1_median_ms']:.2f} | {r['pool']}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
