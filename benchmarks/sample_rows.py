"""Sampling one step of workload B: ``decode_step`` over 16 rows of 32000 logits (temperature 1,
seeded, ``ignore_eos`` with one end token, as the benchmark's best-of-16 request), PyTorch's
passes against the native kernel (``sample_rows.c``) on one and two threads, interleaved round by
round. Prints medians, bests and the per-round ratio range; ``--json PATH``
writes them. ``python -m benchmarks.sample_rows [--rounds 60] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from metagen.decoding import SequenceState, decode_step
from metagen.engine.native.sample_rows import load
from metagen.types import SamplingParams


def measure(rounds: int = 60, rows: int = 16, vocab: int = 32000) -> dict[str, dict[str, float]]:
    """Milliseconds per ``decode_step`` per way: median, best, and PyTorch's time over this
    way's per round (median, min, max)."""
    torch.set_num_threads(1)  # as the engine samples: torch inline, the kernel on its pool
    kernel = load()
    if kernel is None:
        raise SystemExit("no native library on this machine")
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(0)) * 3
    params = SamplingParams(n=rows, temperature=1.0, seed=7, ignore_eos=True)
    seqs = [SequenceState(params, list(range(512)), sample_index=i, eos_token_ids=(2,))
            for i in range(rows)]
    ways = {"pytorch": None, "native, 1 thread": kernel.on(1), "native, 2 threads": kernel.on(2)}
    ms: dict[str, list[float]] = {w: [] for w in ways}
    for _ in range(rounds):
        for name, k in ways.items():
            t0 = time.perf_counter()
            decode_step(logits, seqs, k)
            ms[name].append((time.perf_counter() - t0) * 1e3)
    out = {}
    for name in ways:
        ratio = [a / b for a, b in zip(ms["pytorch"], ms[name])]
        out[name] = {"median_ms": statistics.median(ms[name]), "best_ms": min(ms[name]),
                     "ratio_median": statistics.median(ratio), "ratio_min": min(ratio),
                     "ratio_max": max(ratio)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    result = measure(args.rounds)
    for name, r in result.items():
        print(f"{name}: median {r['median_ms']:.2f} ms (best {r['best_ms']:.2f}); pytorch / this "
              f"per round {r['ratio_median']:.2f} ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rounds": args.rounds, "ways": result}, f, indent=1)


if __name__ == "__main__":
    main()
