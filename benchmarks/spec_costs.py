"""What a speculative round costs on this CPU, measured, beside adaptive k's cost model.

Adaptive speculation (``metagen.engine.adaptive_k``) chooses a row's ``k`` from two costs in
target decode steps: a draft step's (``draft_step_cost``: a ratio of bytes read, each step's
fixed cost counted as ``STEP_OVERHEAD_BYTES``) and one more verified token's
(``verify_step_cost``: by the target's weight scheme). This measures both on workload D's pair
(the engine benchmark's good target and its draft, 256 cached positions), each target scheme in
turn:

- a decode step of each model: the engine's greedy time per token (``max_tokens`` 129 against 1,
  same prompt), so scheduling, sampling and Python are in it as in a round;
- a verify step of ``t`` tokens: the target runner's extend of ``t`` new tokens with every
  token's logits, against one token's (``(time(t) / time(1) - 1) / (t - 1)``).

Reported per target: its step, the drafts' steps as fractions of it beside the model's
``draft_step_cost``, and the verify cost per extra token at each ``t`` beside
``verify_step_cost``: medians over ``--rounds`` rounds of each round's ratio (configurations
interleaved, their order alternating), since this machine's speed moves between minutes.

``python -m benchmarks.spec_costs [--threads 1] [--rounds 9] [--targets float32,int8,w8a8,int4]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import torch

from benchmarks import factory
from benchmarks.decode_step import _setup
from benchmarks.peers.inprocess import MetagenPeer
from benchmarks.workloads import Settings, random_prompt
from metagen.engine.adaptive_k import draft_step_cost, verify_step_cost
from metagen.engine.config import Quantization
from metagen.engine.models.interface import CausalLM
from metagen.engine.models.loader import load_model

DRAFTS: dict[str, Quantization | None] = {"draft": None, "draft-int8": "int8"}
VERIFY_TOKENS = (2, 3, 5)


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def step_times(models: dict[str, CausalLM], rounds: int) -> dict[str, list[float]]:
    """Per round, the per-token greedy decode time (s) of the target ("good_target") and of each
    draft, on the engine (rounds alternate the order)."""
    peer = MetagenPeer()
    peer.models = dict(models)
    prompt = random_prompt(Settings().d_prompt, factory.FULL.vocab, 4)
    samples: dict[str, list[float]] = {m: [] for m in ("good_target", *DRAFTS)}
    for r in range(rounds + 1):  # round 0 warms up, untimed
        for m in (list(samples) if r % 2 else list(samples)[::-1]):
            one = median_time(lambda: peer.greedy(m, prompt, 1), 3)
            many = median_time(lambda: peer.greedy(m, prompt, 129), 1)
            if r:
                samples[m].append((many - one) / 128)
    return samples


def verify_costs(model: CausalLM, rounds: int) -> dict[int, float]:
    """Per extra verified token, in one-token steps of the target's runner (module docstring):
    the median over rounds of each round's ratio (rounds alternate the order)."""
    setups = {}
    for t in (1, *VERIFY_TOKENS):
        runner, reqs = _setup(model, 1, Settings().d_prompt, True, tokens=t)
        setups[t] = (runner, [replace(r, all_logits=True) for r in reqs])
    costs: dict[int, list[float]] = {t: [] for t in VERIFY_TOKENS}
    for r in range(rounds + 1):
        took = {}
        for t in (list(setups) if r % 2 else list(setups)[::-1]):
            runner, reqs = setups[t]
            took[t] = median_time(lambda: runner.extend(reqs), 5)
        if r:
            for t in VERIFY_TOKENS:
                costs[t].append((took[t] / took[1] - 1) / (t - 1))
    return {t: statistics.median(v) for t, v in costs.items()}


def measure(target: str, rounds: int, paths: dict[str, Path]) -> dict[str, Any]:
    scheme = None if target == "float32" else cast(Quantization, target)
    models = {"good_target": load_model(paths["good_target"], quantization=scheme),
              **{name: load_model(paths["draft"], quantization=draft_scheme)
                 for name, draft_scheme in DRAFTS.items()}}
    steps = step_times(models, rounds)
    verify = verify_costs(models["good_target"], rounds)
    row: dict[str, Any] = {"target": target,
                           "target_step_ms": round(statistics.median(steps["good_target"]) * 1e3,
                                                   3),
                           "verify_cost": {t: round(v, 3) for t, v in verify.items()},
                           "verify_cost_model": verify_step_cost(models["good_target"])}
    for name in DRAFTS:
        ratios = [d / t for d, t in zip(steps[name], steps["good_target"])]
        row[name] = {"step_ms": round(statistics.median(steps[name]) * 1e3, 3),
                     "cost": round(statistics.median(ratios), 3),
                     "cost_model": round(draft_step_cost(models[name], models["good_target"]), 3)}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--targets", default="float32,int8,w8a8,int4")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    paths = factory.build_models(factory.models_dir(None), factory.FULL, perturb=0.2)
    rows = []
    for target in a.targets.split(","):
        row = measure(target, a.rounds, paths)
        rows.append(row)
        print(f"{target:8s} step {row['target_step_ms']:.2f} ms | verify per extra token "
              + " ".join(f"t={t}: {v:.3f}" for t, v in row["verify_cost"].items())
              + f" (model {row['verify_cost_model']:.2f}) | "
              + " | ".join(f"{d} {row[d]['step_ms']:.2f} ms = {row[d]['cost']:.3f} "
                           f"(model {row[d]['cost_model']:.3f})" for d in DRAFTS), flush=True)
    if a.json:
        a.json.write_text(json.dumps({"threads": a.threads, "rounds": a.rounds, "rows": rows},
                                     indent=1) + "\n")


if __name__ == "__main__":
    main()
