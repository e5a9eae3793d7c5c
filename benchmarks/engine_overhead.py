"""The engine's per-step work outside the native decode step and the LM head, by piece.

    python -m benchmarks.engine_overhead [--threads 1] [--workload A|B] [--repeats 2]
        [--quantization int8|w8a8|int4] [--clock cpu|wall] [--json PATH]

Runs workload A (batch-1 greedy, 256-token prompt, 128 new tokens) or B (best-of-16, 512-token
prompt, 64 new tokens) through the engine exactly as ``engine_bench``'s metagen peer does, and
times each decode step's pieces in the calling thread's CPU time (``time.thread_time_ns``, so a
loaded machine's waiting is not counted; work on the native pool's other threads is not either):
the step, the native step (``DecodeStep.__call__``), the LM head, the scheduler, the plan, the
sampler, emit. ``outside`` = step - native step - head: the per-token budget this benchmark is
for. Prints the 10th percentile and the median over the timed runs' decode steps (the 10th: the
least disturbed by other processes). ``--clock wall`` times the same pieces by the wall clock
instead: at two threads the native step's wall time includes its waits for the pool, which the
calling thread's CPU time does not see. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import factory, workloads
from benchmarks.peers.inprocess import MetagenPeer

CLOCKS = {"cpu": time.thread_time_ns, "wall": time.perf_counter_ns}


def _wrap(cur: dict[str, int], owner: Any, name: str, key: str,
          clock: Callable[[], int]) -> None:
    """Replace ``owner.name`` by a function adding its time by ``clock`` to ``cur[key]``."""
    orig = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t = clock()
        try:
            return orig(*args, **kwargs)
        finally:
            cur[key] += clock() - t

    setattr(owner, name, timed)


def measure(threads: int, workload: str, repeats: int, cache: Path,
            quantization: str | None = None, clock: str = "cpu") -> dict[str, list[float]]:
    """Per piece, its time (us, by ``CLOCKS[clock]``) in every decode step of ``repeats`` runs
    after a warm-up; ``quantization`` as the metagen-int8 / -w8a8 / -int4 peers load the
    model."""
    tick = CLOCKS[clock]
    from metagen.engine import llm_engine, model_runner, scheduler
    from metagen.engine.models import llama
    from metagen.engine.native import decode_step

    torch.set_num_threads(threads)
    paths = factory.build_models(cache, factory.FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.quantization = quantization
    peer.load({"target": paths["target"]})
    s = workloads.FULL_SETTINGS
    cur: dict[str, int] = collections.defaultdict(int)
    for owner, name, key in [
            (decode_step.DecodeStep, "__call__", "native step"),
            (llama.LlamaModel, "logits", "head"), (scheduler.Scheduler, "schedule", "schedule"),
            (model_runner.ModelRunner, "extend", "extend"),
            (model_runner.ModelRunner, "_plan", "plan"), (llama, "rms_norm", "final norm"),
            (llm_engine.LLMEngine, "_sample", "sample"),
            (llm_engine, "decode_step", "sampler"), (llm_engine.LLMEngine, "emit", "emit")]:
        _wrap(cur, owner, name, key, tick)
    if hasattr(llm_engine, "greedy_step"):  # plain greedy rows' early exit: sampler and sample
        _wrap(cur, llm_engine, "greedy_step", "sampler", tick)
        _wrap(cur, llm_engine.LLMEngine, "_sample_greedy", "sample", tick)
    per: dict[str, list[float]] = collections.defaultdict(list)
    step = llm_engine.LLMEngine.step

    def timed_step(self: Any) -> Any:  # `self` as in LLMEngine.step, which it replaces
        cur.clear()
        t = tick()
        out = step(self)
        total = tick() - t
        if cur.get("native step"):  # a decode step (a prefill runs in PyTorch)
            for k, v in [("step", total), *cur.items(),
                         ("outside", total - cur["native step"] - cur["head"])]:
                per[k].append(v / 1e3)
        return out

    llm_engine.LLMEngine.step = timed_step  # type: ignore[method-assign]
    if workload == "A":
        prompt = workloads.random_prompt(s.a_prompt, factory.FULL.vocab, 1)
        run: Callable[[], Any] = lambda: peer.greedy("target", prompt, s.a_new)  # noqa: E731
    else:
        prompt = workloads.random_prompt(s.b_prompt, factory.FULL.vocab, 2)
        run = lambda: peer.best_of_n("target", prompt, s.b_n, s.b_new, 7)  # noqa: E731
    run()
    per.clear()
    for _ in range(repeats):
        run()
    return dict(per)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workload", choices=["A", "B"], default="A")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quantization", choices=["int8", "w8a8", "int4"], default=None)
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    ap.add_argument("--json", default=None)
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    cache = factory.models_dir(args.cache_dir)
    per = measure(args.threads, args.workload, args.repeats, cache, args.quantization,
                  args.clock)
    q = lambda v, f: sorted(v)[int(f * (len(v) - 1))]  # noqa: E731
    rows = {k: {"p10": q(v, 0.1), "median": q(v, 0.5), "steps": len(v)} for k, v in per.items()}
    print(f"workload {args.workload} ({args.quantization or 'float32'}), {args.threads} "
          f"thread(s): {args.clock} us per decode step")
    print(f"{'piece':12s} {'p10':>9s} {'median':>9s}")
    for k, r in rows.items():
        print(f"{k:12s} {r['p10']:9.1f} {r['median']:9.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"workload": args.workload, "threads": args.threads,
                                               "quantization": args.quantization,
                                               "clock": args.clock, "us_per_step": rows},
                                              indent=1))


if __name__ == "__main__":
    main()
