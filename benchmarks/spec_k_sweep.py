"""Workload D over the number of drafts ``k``: which ``k`` pays on this CPU.

    python -m benchmarks.spec_k_sweep [--threads 1] [--ks 1,2,3,4] [--trees "2;2,1"]
        [--repeats 3] [--json PATH]

On workload D's good pair (the engine benchmark's models, its 256-token random prompt, 128
greedy tokens), metagen's own greedy and speculative greedy with the float32 draft and the
int8 draft at each ``k``, interleaved round by round (every configuration once per round, after
one untimed round); reports each configuration's median wall time, its speed over own greedy
and its acceptance rate, overall and per draft depth (of the drafts a round tested at depth d,
the fraction accepted). Every speculative output is checked equal to greedy's. ``--trees``
(``;``-separated, each as ``EngineConfig.speculative_tree``) adds, at each ``k``, each draft with
each tree: candidates beside the drafts, verified in the same step; their rows report tokens per
round and the rounds a leaf carried.

Why: a round of ``k`` drafts verifies ``k + 1`` rows in one target step. Where one row is bound
by the weights' bandwidth and ``k + 1`` rows by the multiply rate (AVX2 has half AVX-512's), the
verify step grows with ``k`` and a smaller ``k`` pays; ``adaptive_k.VERIFY_COST`` (0.1 step per
row) was measured on AVX-512. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from collections.abc import Sequence
from typing import Any

import torch

MODES = ("draft", "draft-int8")


Config = tuple[str, int, tuple[int, ...]]  # draft mode, k, tree


def run(threads: int, ks: list[int], repeats: int, trees: Sequence[tuple[int, ...]] = ()
        ) -> dict[str, Any]:
    from benchmarks.factory import FULL, build_models, models_dir
    from benchmarks.peers.inprocess import MetagenPeer
    from benchmarks.workloads import FULL_SETTINGS as s
    from benchmarks.workloads import random_prompt

    torch.set_num_threads(threads)
    # the engine benchmark's models (its full sizes and perturbation) in its cache folder
    paths = build_models(models_dir(), FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.load(paths)
    prompt = random_prompt(s.d_prompt, FULL.vocab, 4)
    configs: list[Config] = [("greedy", 0, ())] + [
        (m, k, t) for m in MODES for k in ks for t in [(), *(t[:k] for t in trees)]]
    configs = list(dict.fromkeys(configs))  # a tree cut to k may repeat another
    greedy = peer.greedy("good_target", prompt, s.d_new)

    def once(mode: str, k: int, tree: tuple[int, ...]) -> tuple[float, dict[str, Any]]:
        start = time.perf_counter()
        if mode == "greedy":
            out, last = peer.greedy("good_target", prompt, s.d_new), {}
        else:
            out = peer.speculative("good_target", prompt, s.d_new, k, mode, tree)
            last = dict(peer.last)
        took = time.perf_counter() - start
        if out != greedy:
            raise AssertionError(f"{mode} k={k} tree={tree}: output differs from greedy")
        return took, last

    for c in configs:  # untimed round
        once(*c)
    times: dict[Config, list[float]] = {c: [] for c in configs}
    lasts: dict[Config, dict[str, Any]] = {}  # greedy drafts: the same every repeat
    for _ in range(repeats):
        for c in configs:
            took, lasts[c] = once(*c)
            times[c].append(took)
    base = statistics.median(times[configs[0]])
    rows = [{"mode": m, "k": k, "tree": list(t), "time_s": statistics.median(times[(m, k, t)]),
             "times_s": times[(m, k, t)],
             "x_own_greedy": base / statistics.median(times[(m, k, t)]),
             "acceptance_rate": lasts[(m, k, t)].get("acceptance_rate"),
             "acceptance_by_depth": lasts[(m, k, t)].get("acceptance_by_depth", []),
             "tokens_per_round": lasts[(m, k, t)].get("tokens_per_round"),
             "leaves_accepted": lasts[(m, k, t)].get("leaves_accepted")}
            for m, k, t in configs]
    return {"threads": threads, "repeats": repeats, "d_prompt": s.d_prompt, "d_new": s.d_new,
            "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ks", default="1,2,3,4")
    ap.add_argument("--trees", default="", help="';'-separated trees, e.g. '2;2,1;1,1,1,1'")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    trees = [tuple(int(w) for w in t.split(",")) for t in args.trees.split(";") if t.strip()]
    result = run(args.threads, [int(k) for k in args.ks.split(",")], args.repeats, trees)
    print(f"| draft | k | tree | median s | x own greedy | acceptance | by depth | tokens/round "
          f"| leaf rounds |  ({args.threads} thread(s))")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        rate = "-" if r["acceptance_rate"] is None else f"{r['acceptance_rate']:.2f}"
        depth = "/".join(f"{a:.2f}" for a in r["acceptance_by_depth"]) or "-"
        per = "-" if r["tokens_per_round"] is None else f"{r['tokens_per_round']:.2f}"
        tree = ",".join(map(str, r["tree"])) or "-"
        print(f"| {r['mode']} | {r['k']} | {tree} | {r['time_s']:.3f} | "
              f"{r['x_own_greedy']:.2f}x | {rate} | {depth} | {per} | "
              f"{r['leaves_accepted'] if r['leaves_accepted'] is not None else '-'} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
