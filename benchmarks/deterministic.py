"""What ``EngineConfig(deterministic=True)`` costs, on the testbed policy, against the default
engine in the same run.

``python -m benchmarks.deterministic [--repeats R] [--threads T] [--json PATH]``

Three workloads, each timed on both engines alternately (R rounds; the ratio of medians is
what is reported, since the machine is shared):

- ``batch1``: one prompt, greedy, 128 tokens (every step one row: both engines run the same
  native step; the deterministic one also computes the head natively);
- ``best_of_16``: 16 prompts x 16 samples at T = 0.8, 100 tokens (256 rows a step: the default
  engine's products go through MKL, the deterministic one's through 16 native steps);
- ``prefill``: 16 prompts of ~256 tokens, one token each (the default engine's prefill is MKL's
  GEMM and PyTorch's attention; the deterministic one's is pieces of 16 tokens).

Each engine is warmed up on its first call (native build, panel copies), and the prefix cache
is off so every round computes the same work.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import metagen
from metagen.generators.local import LocalGenerator
from metagen.testbed.problems import format_prompt, make_problems
from metagen.types import SamplingParams

POLICY = Path(metagen.__file__).parent / "testbed" / "models" / "policy"


def workloads() -> dict[str, tuple[list[str], SamplingParams]]:
    prompts = [format_prompt(p) for p in make_problems("test", 16, seed=0)]
    long = [" ".join([p] * 6) for p in prompts]  # ~250-300 tokens each
    return {
        "batch1": (prompts[:1], SamplingParams(temperature=0.0, max_tokens=128,
                                               ignore_eos=True)),
        "best_of_16": (prompts, SamplingParams(n=16, temperature=0.8, max_tokens=100, seed=1)),
        "prefill": (long, SamplingParams(temperature=0.0, max_tokens=1)),
    }


def measure(repeats: int) -> dict[str, Any]:
    gens = {det: LocalGenerator.from_pretrained(POLICY, deterministic=det, prefix_cache=False)
            for det in (False, True)}
    out: dict[str, Any] = {}
    for name, (prompts, params) in workloads().items():
        times: dict[bool, list[float]] = {False: [], True: []}
        for gen in gens.values():
            gen.generate(prompts, params)  # warm-up
        for _ in range(repeats):
            for flag, gen in gens.items():
                t = time.perf_counter()
                gen.generate(prompts, params)
                times[flag].append(time.perf_counter() - t)
        default, det = statistics.median(times[False]), statistics.median(times[True])
        out[name] = {"default_s": default, "deterministic_s": det, "ratio": det / default}
        print(f"{name:12s} deterministic / default time: {det / default:.2f}x "
              f"(medians of {repeats}: {det:.3f} s / {default:.3f} s)", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    result = {"threads": torch.get_num_threads(), "workloads": measure(args.repeats)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
