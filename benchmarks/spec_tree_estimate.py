"""What a token-tree draft would buy on workload D's good pair, measured without building one.

    python -m benchmarks.spec_tree_estimate [--prompts 4] [--rounds 15] [--json PATH]

1. Draft ranks: along the good target's greedy path (D's 256-token random prompts, 128 tokens),
   the rank of the target's token among the float32 draft's logits at every position, the draft
   run teacher-forced over the path (transformers, one forward). Accepted drafts are the
   target's tokens, so a draft following an accepted branch sees exactly this path: the ranks
   give a chain's and a tree's accepted lengths exactly (:func:`tokens_per_round`).
2. Verification cost: one target step of ``n`` new tokens with all their logits, over a
   320-token cached context, ``n`` interleaved round by round, as a multiple of a one-token
   step (per-round ratios, min-max).

A tree of width ``w`` at its first position and greedy chains below has ``w * k`` nodes.
Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

WIDTHS = {"chain": [], "top2 at 1": [2], "top2 at 1-2": [2, 2], "top4 at 1": [4]}


def tokens_per_round(ranks: list[list[int]], k: int, widths: list[int]) -> float:
    """Mean tokens a round emits over the paths' ``ranks`` (the target's token's rank in the
    draft at each position), drafting depth ``k`` with ``widths[d]`` candidates at depth ``d``
    (1 past the list): a draft is accepted while its rank is below its depth's width."""
    emitted = rounds = 0
    for path in ranks:
        s = 0
        while s < len(path):
            a = 0
            while a < k and s + a < len(path) and path[s + a] < (
                    widths[a] if a < len(widths) else 1):
                a += 1
            s += a + 1
            emitted += a + 1
            rounds += 1
    return emitted / rounds


def draft_ranks(paths: dict[str, Path], prompts: list[list[int]], new: int) -> list[list[int]]:
    from transformers import AutoModelForCausalLM

    from metagen.engine.config import EngineConfig
    from metagen.engine.llm_engine import LLMEngine
    from metagen.types import SamplingParams

    target = LLMEngine.from_pretrained(paths["good_target"], EngineConfig(
        device="cpu", kv_cache_bytes=64 << 20, max_model_len=1024), tokenizer=False)
    target.eos_token_ids = ()
    draft = AutoModelForCausalLM.from_pretrained(paths["draft"], dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        path = list(target.generate([prompt], SamplingParams(
            temperature=0, max_tokens=new, ignore_eos=True))[0].outputs[0].token_ids)
        with torch.no_grad():
            logits = draft(torch.tensor([prompt + path])).logits[0, len(prompt) - 1:-1]  # (new, V)
        want = logits.gather(1, torch.tensor(path)[:, None])  # (new, 1)
        out.append((logits > want).sum(dim=1).tolist())  # rank: how many logits beat it
    return out


def verify_cost(target_path: Path, ns: list[int], rounds: int) -> dict[int, dict[str, float]]:
    from benchmarks.workloads import random_prompt
    from metagen.engine.config import EngineConfig
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.model_runner import ExtendRequest

    eng = LLMEngine.from_pretrained(target_path, EngineConfig(
        device="cpu", num_blocks=64, block_size=16, max_model_len=1024), tokenizer=False)
    context = random_prompt(320, eng.vocab_size, 4)
    table = list(range(-(-(320 + max(ns)) // 16)))
    eng.runner.extend([ExtendRequest(table, 0, context)])
    times: dict[int, list[float]] = {n: [] for n in ns}
    for _ in range(rounds):
        for n in ns:  # the same slots each time: only the cost matters here
            t0 = time.perf_counter()
            eng.runner.extend([ExtendRequest(table, 320, context[:n], all_logits=True)])
            times[n].append(time.perf_counter() - t0)
    out = {}
    for n in ns:
        r = [t / one for t, one in zip(times[n], times[1])]
        out[n] = {"ms_median": 1e3 * statistics.median(times[n]),
                  "x_one_token_median": statistics.median(r), "min": min(r), "max": max(r)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from benchmarks import factory, workloads

    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    s = workloads.FULL_SETTINGS
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    prompts = [workloads.random_prompt(s.d_prompt, factory.FULL.vocab, 4 + i)
               for i in range(a.prompts)]
    ranks = draft_ranks(paths, prompts, s.d_new)
    flat = [r for path in ranks for r in path]
    top = {f"top{w}": sum(r < w for r in flat) / len(flat) for w in (1, 2, 4)}
    trees = {f"k={k}": {name: {"tokens_per_round": tokens_per_round(ranks, k, w),
                               "nodes": k * (w[0] if w else 1) if len(w) < 2 else
                               w[0] + w[0] * w[1] * (k - 1)}
                        for name, w in WIDTHS.items()} for k in (2, 3, 4, 5)}
    cost = verify_cost(paths["good_target"], [1, 2, 3, 4, 5, 6, 8, 10, 12, 16], a.rounds)
    result = {"meta": {"threads": torch.get_num_threads(), "prompts": a.prompts,
                       "positions": len(flat), "rounds": a.rounds},
              "draft_top": top, "trees": trees, "verify_cost": cost}
    print("draft hits the target's token:", ", ".join(f"{k} {v:.3f}" for k, v in top.items()))
    for k, row in trees.items():
        print(k, "; ".join(f"{name} {v['tokens_per_round']:.2f} tok/round ({v['nodes']} nodes)"
                           for name, v in row.items()))
    for n, c in cost.items():
        print(f"verify {n:2d} tokens: {c['ms_median']:6.1f} ms, {c['x_one_token_median']:.2f}x "
              f"one token ({c['min']:.2f}-{c['max']:.2f})")
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
