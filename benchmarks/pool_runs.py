"""Workload A through the engine with the native pool's counters: how often its
oversubscription guard sent jobs to one thread, and what a run cost, at one thread and at two.

    python -m benchmarks.pool_runs [--quantization int4] [--rounds 2] [--runs 8]
        [--spincount0] [--before TREE] [--json PATH]

Each configuration (threads 1 or 2; with ``--spincount0`` also two threads under
``GOMP_SPINCOUNT=0``, torch's OpenMP workers sleeping at once after each operator) is a fresh
process, so the guard starts clean and the environment reaches libgomp; configurations run
interleaved, round after round, so a load that comes and goes hits them alike. A process times
``--runs`` prefills (A's 256-token prompt, one new token) and then ``--runs`` whole A runs (128
new tokens), after one untimed run of each, and reads the pool's counters over each kind:
jobs on threads, jobs the guard ran alone, fallbacks (``mg_pool_stats``). Prints medians and
minima over the rounds' runs (ms). ``--before TREE``: an older checkout (``git archive REV |
tar -x -C TREE``), whose ``metagen`` runs the same configurations under this checkout's
harness, interleaved with this one's. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.thread_scaling import under_this_harness

HERE = Path(__file__).resolve().parent.parent
CONFIGS = {"1 thread": ("1", {}), "2 threads": ("2", {}),
           "2 threads, GOMP_SPINCOUNT=0": ("2", {"GOMP_SPINCOUNT": "0"})}


def one(threads: int, quantization: str | None, runs: int) -> dict[str, Any]:
    """This process's measurement: {kind: {"ms": [...], "pool": [threaded, alone, fallbacks]}}."""
    import torch

    from benchmarks import factory, workloads
    from benchmarks.oversubscribed import pool_stats
    from benchmarks.peers.inprocess import MetagenPeer

    torch.set_num_threads(threads)
    paths = factory.build_models(factory.models_dir(None), factory.FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.quantization = quantization
    peer.load({"target": paths["target"]})
    s = workloads.FULL_SETTINGS
    prompt = workloads.random_prompt(s.a_prompt, factory.FULL.vocab, 1)
    out: dict[str, Any] = {}
    for kind, new in (("prefill", 1), ("whole A", s.a_new)):
        peer.greedy("target", prompt, new)
        before, ms = pool_stats(), []
        for _ in range(runs):
            t = time.perf_counter()
            peer.greedy("target", prompt, new)
            ms.append((time.perf_counter() - t) * 1e3)
        out[kind] = {"ms": ms, "pool": [a - b for a, b in zip(pool_stats(), before)]}
    return out


def _rounds(args: argparse.Namespace, configs: dict[str, tuple[str, dict[str, str]]],
            trees: dict[str, Path]) -> dict[str, dict[str, Any]]:
    """Every (tree, configuration) once a round, each a fresh child process; their runs and
    pool counters summed per configuration."""
    got: dict[str, dict[str, Any]] = {}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            for name, (threads, extra) in configs.items():
                env = {**os.environ, **extra}
                for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                    env.pop(var, None)
                if "GOMP_SPINCOUNT" not in extra:
                    env.pop("GOMP_SPINCOUNT", None)
                res = subprocess.run(
                    [sys.executable, "-m", "benchmarks.pool_runs", "--child", threads,
                     "--quantization", args.quantization, "--runs", str(args.runs)],
                    env=env, check=True, capture_output=True, text=True, cwd=tree)
                row = got.setdefault(label + name, {})
                for kind, r in json.loads(res.stdout.strip().splitlines()[-1]).items():
                    acc = row.setdefault(kind, {"ms": [], "pool": [0, 0, 0]})
                    acc["ms"] += r["ms"]
                    acc["pool"] = [a + b for a, b in zip(acc["pool"], r["pool"])]
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quantization", choices=["none", "int8", "w8a8", "int4"], default="int4")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--spincount0", action="store_true")
    ap.add_argument("--before", type=Path, default=None, help="an older checkout")
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    quantization = None if args.quantization == "none" else args.quantization
    if args.child:
        print(json.dumps(one(args.child, quantization, args.runs)))
        return 0
    configs = {k: v for k, v in CONFIGS.items() if args.spincount0 or "GOMP" not in k}
    trees = {"": HERE}
    work = Path(tempfile.mkdtemp(prefix="pool-runs-"))
    try:
        if args.before:
            trees = {"before: ": under_this_harness(args.before, work / "before"), "": HERE}
        got = _rounds(args, configs, trees)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"workload A ({args.quantization}), {args.rounds} rounds x {args.runs} runs: "
          "median (min) ms | pool: threaded, alone, fallbacks")
    for name, kinds in got.items():
        cells = [f"{k} {statistics.median(r['ms']):.1f} ({min(r['ms']):.1f}) | {r['pool']}"
                 for k, r in kinds.items()]
        print(f"{name:36s} | " + " | ".join(cells))
    if args.json:
        Path(args.json).write_text(json.dumps({"quantization": args.quantization,
                                               "rounds": args.rounds, "runs": args.runs,
                                               "configs": got}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
