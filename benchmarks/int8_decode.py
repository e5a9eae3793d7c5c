"""Batch-1 greedy decoding of the benchmark target, float32 against int8 weights (weight-only,
and w8a8: activations quantized too), interleaved.

    python -m benchmarks.int8_decode [ROUNDS]      (default 5; prints one JSON object)

A 16-token prompt and 64 new tokens, so the time is decoding's; each round runs both engines
back to back, and the ratio of the medians (and of each round) is what a loaded machine can
still compare. The models are :mod:`benchmarks.factory`'s (built once into
:func:`benchmarks.factory.models_dir`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from benchmarks import factory
from benchmarks.peers.inprocess import MetagenInt8Peer, MetagenPeer, MetagenW8A8Peer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    rounds = int(args[0]) if args else 5
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    peers = [MetagenPeer(), MetagenInt8Peer(), MetagenW8A8Peer()]
    for p in peers:
        p.load({"target": paths["target"]})
    prompt = list(range(3, 19))
    times: dict[str, list[float]] = {p.name: [] for p in peers}
    for p in peers:
        p.greedy("target", prompt, 8)  # warm-up: builds the native library, first allocations
    for _ in range(rounds):
        for p in peers:
            t0 = time.perf_counter()
            p.greedy("target", prompt, 64)
            times[p.name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"times_s": times, "median_s": med,
                      "tok_s": {k: 64 / v for k, v in med.items()},
                      "int8_over_fp32_speed": med["metagen"] / med["metagen-int8"],
                      "per_round_ratio": [a / b for a, b in zip(times["metagen"],
                                                                times["metagen-int8"])],
                      "w8a8_over_int8_speed": med["metagen-int8"] / med["metagen-w8a8"],
                      "w8a8_per_round_ratio": [a / b for a, b in zip(times["metagen-int8"],
                                                                     times["metagen-w8a8"])]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
