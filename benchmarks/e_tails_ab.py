"""Workload E's step search with and without the prefix cache's kept tails, next to best-of-n,
interleaved in one process (the before/after of keeping finished sequences' partial blocks).

    python -m benchmarks.e_tails_ab [--prompts 8] [--steps 3] [--repeats 3] [--json PATH]

"Without" is the same engine with ``radix.tails.max_entries = 0`` (every step recomputes its
predecessor's partial block). Prints and records times, the searches' time over best-of-n's
run by run, and their prefill counts. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks import factory, workloads
from benchmarks.peers import MetagenPeer


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.load(paths)
    s = dataclasses.replace(workloads.FULL_SETTINGS, e_prompts=args.prompts, e_steps=args.steps)
    prompts = workloads.e_prompts(s, factory.FULL.vocab)
    with_tails = peer.engine

    def without_tails(*a: Any, **k: Any) -> Any:
        eng = with_tails(*a, **k)
        eng.radix.tails.max_entries = 0
        return eng

    times: dict[str, list[float]] = {"tails": [], "no_tails": [], "best_of_n": []}
    counts: dict[str, dict[str, int]] = {}
    for _ in range(args.repeats):
        for name in times:
            peer.engine = without_tails if name == "no_tails" else with_tails  # type: ignore[method-assign]
            fn = workloads.e_best_of_n if name == "best_of_n" else workloads.e_search
            t0 = time.perf_counter()
            out = fn(peer, s, prompts)
            times[name].append(time.perf_counter() - t0)
            counts[name] = {k: v for k, v in out.items() if k != "beams"}
            print(name, f"{times[name][-1]:.2f} s", counts[name], file=sys.stderr, flush=True)
    ratio = {k: [a / b for a, b in zip(times[k], times["best_of_n"])]
             for k in ("tails", "no_tails")}
    result = {"settings": {k: getattr(s, k) for k in s.__slots__}, "times": times,
              "counts": counts, "over_best_of_n": ratio,
              "median_over_best_of_n": {k: statistics.median(v) for k, v in ratio.items()},
              "tails_over_no_tails": [a / b for a, b in zip(times["tails"], times["no_tails"])]}
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
