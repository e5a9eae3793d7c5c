"""Workload D's int8 draft case with the draft's direct steps on and off, interleaved.

    python -m benchmarks.spec_direct_ab [--rounds 6] [--k 4] [--json PATH]

On the engine benchmark's random-weight pair (:mod:`benchmarks.factory`, the models cached as
``engine_bench`` caches them) and D's prompt (256 tokens, 128 new), one thread: each round runs
own greedy, then speculative greedy with ``DraftModelProposer(direct=False)`` (every draft step
a step of the draft engine's loop) and with ``direct=True``
(:mod:`metagen.engine.direct_steps`), in alternating order, so a load that comes and goes hits
both alike. Reported: per-round times, each path's speed-up over the round's greedy, and the
per-round ratio direct over loop (medians and ranges). Every speculative run's tokens are
checked against greedy's. Timings are reported, never asserted. Both clocks are recorded: wall
time, and the thread's CPU time (everything runs on the calling thread at one thread), which a
machine loaded by other processes inflates less.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import factory, workloads
from benchmarks.engine_bench import cpu_info
from benchmarks.peers.inprocess import MetagenPeer


def _speculative(peer: MetagenPeer, prompt: list[int], k: int, direct: bool
                 ) -> tuple[tuple[float, float], list[int]]:
    """One speculative greedy run of D's int8 draft case with the draft's direct steps on/off
    (the peer builds the proposer; its class default is switched for the run)."""
    from metagen.engine import draft_proposer

    cls = draft_proposer.DraftModelProposer
    default = cls.__init__.__defaults__
    cls.__init__.__defaults__ = (direct,)
    try:
        t, c = time.perf_counter(), time.thread_time()
        out = peer.speculative("good_target", prompt, workloads.FULL_SETTINGS.d_new, k,
                               "draft-int8")
        return (time.perf_counter() - t, time.thread_time() - c), out
    finally:
        cls.__init__.__defaults__ = default


def run(rounds: int, k: int) -> dict[str, Any]:
    torch.set_num_threads(1)
    s = workloads.FULL_SETTINGS
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.load(paths)
    prompt = workloads.random_prompt(s.d_prompt, factory.FULL.vocab, 4)
    greedy = peer.greedy("good_target", prompt, s.d_new)
    wall: dict[str, list[float]] = {"greedy": [], "loop": [], "direct": []}
    cpu: dict[str, list[float]] = {"greedy": [], "loop": [], "direct": []}
    same = True
    for r in range(rounds + 1):  # round 0 warms up
        t, c = time.perf_counter(), time.thread_time()
        peer.greedy("good_target", prompt, s.d_new)
        tg = (time.perf_counter() - t, time.thread_time() - c)
        order = (False, True) if r % 2 else (True, False)
        got = {d: _speculative(peer, prompt, k, d) for d in order}
        same &= all(out == greedy for _, out in got.values())
        if r:
            for i, times in enumerate((wall, cpu)):
                times["greedy"].append(tg[i])
                times["loop"].append(got[False][0][i])
                times["direct"].append(got[True][0][i])
    return {"cpu": cpu_info(), "rounds": rounds, "k": k, "wall": _summary(wall),
            "thread_cpu": _summary(cpu), "acceptance_rate": peer.last["acceptance_rate"],
            "same_tokens_as_greedy": same}


def _stats(v: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(v), "min": min(v), "max": max(v), "runs": v}


def _summary(times: dict[str, list[float]]) -> dict[str, Any]:
    """Times, speed-ups over each round's greedy and the per-round direct-over-loop ratio."""
    return {"times_s": times,
            "x_own_greedy": {p: _stats([g / t for g, t in zip(times["greedy"], times[p])])
                             for p in ("loop", "direct")},
            "direct_over_loop": _stats([a / b for a, b in zip(times["loop"], times["direct"])])}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--k", type=int, default=workloads.FULL_SETTINGS.d_int8_k)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = run(a.rounds, a.k)
    for clock in ("wall", "thread_cpu"):
        for p, v in res[clock]["x_own_greedy"].items():
            print(f"{clock} {p}: {v['median']:.2f}x own greedy ({v['min']:.2f}-{v['max']:.2f})")
        d = res[clock]["direct_over_loop"]
        print(f"{clock} direct over loop, per round: {d['median']:.3f}x "
              f"({d['min']:.3f}-{d['max']:.3f})")
    print(f"acceptance {res['acceptance_rate']:.2f}; tokens == greedy: "
          f"{res['same_tokens_as_greedy']}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
