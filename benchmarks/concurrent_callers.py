"""Many callers, one engine: 8 threads each asking best-of-4 on its own prompt, against the same
32 samples asked by one thread in one call, and against the 8 calls made one after another.

    python -m benchmarks.concurrent_callers [--quick] [--repeats R] [--json PATH]

All three go through :class:`metagen.engine.loop.EngineLoop` (what ``LocalGenerator`` stands on)
on the benchmark's target model (:mod:`benchmarks.factory`), one engine per variant, seeded
sampling with EOS ignored, so every variant computes exactly the same 32 x ``new`` tokens: the
run checks that the three produce the same tokens. The ratio that matters is concurrent / one
call (1.0 = callers batched together as well as one batched call); sequential / concurrent is
what batching across callers buys. Times are min over ``repeats``; never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks import factory
from benchmarks.workloads import random_prompt
from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.loop import EngineLoop
from metagen.engine.models.loader import load_model
from metagen.types import SamplingParams

CALLERS, N = 8, 4


def _loop(model: Any, prompt_len: int, new: int) -> EngineLoop:
    blocks = CALLERS * (N * (new // 16 + 2) + prompt_len // 16 + 2)
    cfg = EngineConfig(block_size=16, num_blocks=blocks, max_num_batched_tokens=4096,
                       max_num_seqs=CALLERS * N, device="cpu")
    return EngineLoop(build_engine(model, None, cfg))


def _one_call(loop: EngineLoop, prompts: list[list[int]], params: SamplingParams) -> list:
    return loop.submit(lambda e: [e.add_request(p, params) for p in prompts]).result()


def _concurrent(loop: EngineLoop, prompts: list[list[int]], params: SamplingParams) -> list:
    outs: list[Any] = [None] * len(prompts)
    start = threading.Barrier(len(prompts))

    def caller(i: int) -> None:
        start.wait()
        outs[i] = loop.submit(lambda e: [e.add_request(prompts[i], params)]).result()[0]

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outs


def _sequential(loop: EngineLoop, prompts: list[list[int]], params: SamplingParams) -> list:
    return [_one_call(loop, [p], params)[0] for p in prompts]


def run(quick: bool = False, repeats: int = 3, cache_dir: str | None = None) -> dict[str, Any]:
    sizes = factory.QUICK if quick else factory.FULL
    cache = factory.models_dir(cache_dir)
    paths = factory.build_models(cache, sizes, perturb=0.3 if quick else 0.2)
    model = load_model(paths["target"])
    vocab = model.cfg.vocab_size
    prompt_len, new = (16, 8) if quick else (64, 64)
    prompts = [random_prompt(prompt_len, vocab, seed=100 + i) for i in range(CALLERS)]
    params = SamplingParams(n=N, temperature=1.0, seed=0, max_tokens=new, ignore_eos=True)
    variants = {"one_call": _one_call, "concurrent": _concurrent, "sequential": _sequential}
    rows: dict[str, dict[str, Any]] = {}
    tokens: dict[str, list] = {}
    for name, fn in variants.items():
        times, steps = [], 0
        for _ in range(repeats + 1):  # the first run warms up and is not timed
            loop = _loop(model, prompt_len, new)
            t0 = time.perf_counter()
            outs = fn(loop, prompts, params)
            times.append(time.perf_counter() - t0)
            steps = loop.call(lambda e: e.counters.steps)
            loop.close()
        tokens[name] = [[c.token_ids for c in o.outputs] for o in outs]
        best = min(times[1:])
        rows[name] = {"seconds_min": best, "seconds": times[1:], "engine_steps": steps,
                      "tokens_per_s": CALLERS * N * new / best}
    same = tokens["one_call"] == tokens["concurrent"] == tokens["sequential"]
    return {
        "workload": f"{CALLERS} callers x best-of-{N}, prompt {prompt_len}, {new} new tokens",
        "model": str(paths["target"].name), "torch_threads": torch.get_num_threads(),
        "variants": rows, "same_tokens": same,
        "concurrent_over_one_call": rows["one_call"]["seconds_min"]
        / rows["concurrent"]["seconds_min"],
        "concurrent_over_sequential": rows["sequential"]["seconds_min"]
        / rows["concurrent"]["seconds_min"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    result = run(args.quick, args.repeats)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
