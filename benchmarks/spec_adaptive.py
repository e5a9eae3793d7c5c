"""Adaptive against fixed k, workload D's pair: the good target (float32, int8 or int4) with the
int8 draft, k at most 4, greedy, against the same engine's greedy without a draft.

Per target precision and round (rounds alternate the order), the time of plain greedy, of a
fixed k = 4 and of ``adaptive`` (``MetagenPeer.speculative(adaptive=True)``: the costs from
``adaptive_k.draft_step_cost`` and ``verify_step_cost``), each speculative output checked equal
to greedy's.
Reported: the median per-round ratio greedy / speculative, and each speculative run's rounds,
drafts proposed and acceptance. ``--probe-every N`` fixes the steps between a k = 0 row's probes
(default: ``adaptive_k.probe_interval`` of the costs; 1: every step drafts at least one token, as
before k could fall to 0).

``python -m benchmarks.spec_adaptive [--threads N] [--rounds 5] [--targets float32,int8,int4]
[--probe-every N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import metagen.engine.speculative_decoding as speculative_decoding
from benchmarks import factory
from benchmarks.peers.inprocess import (
    MetagenInt4Peer, MetagenInt8Peer, MetagenPeer,
)
from benchmarks.workloads import Settings, random_prompt

PEERS = {"float32": MetagenPeer, "int8": MetagenInt8Peer, "int4": MetagenInt4Peer}
K = 4


def measure(target: str, rounds: int, paths: dict[str, Path]) -> dict[str, Any]:
    s = Settings()
    prompt = random_prompt(s.d_prompt, factory.FULL.vocab, 4)
    peer = PEERS[target]()
    peer.load(paths)

    costs: dict[str, float] = {}  # what the adaptive runs were given

    def speculative(adaptive: bool) -> tuple[list[int], dict[str, Any]]:
        tokens = peer.speculative("good_target", prompt, s.d_new, K, "draft-int8",
                                  adaptive=adaptive)
        if adaptive:
            costs.update(draft_cost=round(peer.last["draft_cost"], 3),
                         verify_cost=peer.last["verify_cost"])
        return tokens, {"rounds": peer.last["rounds"], "proposed": peer.last["proposed"],
                        "acceptance": round(peer.last["acceptance_rate"], 3)}

    greedy = peer.greedy("good_target", prompt, s.d_new)
    runs = {"greedy": lambda: (peer.greedy("good_target", prompt, s.d_new), {}),
            "fixed k=4": lambda: speculative(False), "adaptive": lambda: speculative(True)}
    times: dict[str, list[float]] = {n: [] for n in runs}
    info: dict[str, Any] = {}
    for r in range(rounds + 1):  # round 0 warms up, untimed
        for name in (list(runs) if r % 2 else list(runs)[::-1]):
            t0 = time.perf_counter()
            tokens, info[name] = runs[name]()
            if r:
                times[name].append(time.perf_counter() - t0)
            assert tokens == greedy, name  # speculation never changes greedy output
    row: dict[str, Any] = {"target": target, **costs}
    for name in ("fixed k=4", "adaptive"):
        ratios = [g / t for g, t in zip(times["greedy"], times[name])]
        row[name] = {"x_greedy": round(statistics.median(ratios), 3),
                     "min": round(min(ratios), 3), "max": round(max(ratios), 3), **info[name]}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--targets", default="float32,int8,int4")
    ap.add_argument("--probe-every", type=int, default=None)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.probe_every is not None:
        every: int = a.probe_every

        def fixed_interval(draft_cost: float, verify_cost: float = 0.1,
                           k_max: int = 1) -> int | None:
            return every
        speculative_decoding.probe_interval = fixed_interval
    paths = factory.build_models(factory.models_dir(None), factory.FULL, perturb=0.2)
    rows = []
    for target in a.targets.split(","):
        rows.append(measure(target, a.rounds, paths))
        print(json.dumps(rows[-1]), flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"threads": a.threads, "rounds": a.rounds,
                                      "probe_every": a.probe_every,
                                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
