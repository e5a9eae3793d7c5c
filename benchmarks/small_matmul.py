"""Products of a few rows: MKL (``x @ W`` over ``(in, out)``, ``F.linear`` over ``(out, in)``)
against metagen's native kernel, on the benchmark target's shapes, one thread (or ``--threads``).

One "step" is every projection of the 8-layer target plus its head, each weight distinct (so
every step streams 167 MB from memory, as decoding does); the table gives the best time of a few
interleaved repeats per row count M and the kernel's speedup over ``x @ W``, which is what the
engine would use without it.
``python -m benchmarks.small_matmul [--rows 1,2,4] [--threads N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from metagen.engine.native import load_small_matmul

HIDDEN, FFN, VOCAB, LAYERS = 512, 1376, 32000, 8  # the benchmark target (benchmarks/factory.py)
SHAPES = [(HIDDEN, 3 * HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 2 * FFN), (FFN, HIDDEN)] * LAYERS + [
    (HIDDEN, VOCAB)]  # (in, out) of qkv, o, gate_up, down per layer, then the head


def measure(rows: list[int], repeats: int = 5, threads: int = 1) -> list[dict[str, float]]:
    """Best milliseconds per step for each way, per row count, torch (and so the kernel) on
    ``threads`` threads."""
    torch.set_num_threads(threads)
    kernel = load_small_matmul()
    g = torch.Generator().manual_seed(0)
    w_in_out = [torch.randn(k, n, generator=g) * 0.02 for k, n in SHAPES]
    w_out_in = [w.t().contiguous() for w in w_in_out]
    out = []
    for m in rows:
        xs = [torch.randn(m, k, generator=g) for k, _ in SHAPES]
        ways: dict[str, Callable[[], object]] = {
            "x @ W (in, out)": lambda: [torch.mm(x, w) for x, w in zip(xs, w_in_out)],
            "F.linear (out, in)": lambda: [F.linear(x, w) for x, w in zip(xs, w_out_in)]}
        if kernel is not None:
            ways["native kernel"] = lambda: [kernel(x, w) for x, w in zip(xs, w_in_out)]
        best = dict.fromkeys(ways, float("inf"))
        for _ in range(repeats):
            for name, fn in ways.items():
                t0 = time.perf_counter()
                fn()
                best[name] = min(best[name], (time.perf_counter() - t0) * 1e3)
        out.append({"rows": m, **best})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16,24,32")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    kernel = load_small_matmul()
    result = {"threads": args.threads, "kernel_isa": kernel.isa if kernel else None,
              "kernel_max_rows": kernel.max_rows if kernel else None,
              "ms_per_step": measure([int(r) for r in args.rows.split(",")], args.repeats,
                                     args.threads)}
    ways = [k for k in result["ms_per_step"][0] if k != "rows"]
    print("rows | " + " | ".join(f"{w} ms" for w in ways) + " | kernel speedup over x @ W")
    for r in result["ms_per_step"]:
        speed = (f"{r['x @ W (in, out)'] / r['native kernel']:.2f}x" if "native kernel" in r
                 else "-")
        print(f"{r['rows']} | " + " | ".join(f"{r[w]:.1f}" for w in ways) + f" | {speed}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
