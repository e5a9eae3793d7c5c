"""Prompt lookup's own cost: ``proposers.ngram_lookup`` against another revision's, by context
length, and what it does to a whole generation with a long prompt.

    git show REV:metagen/engine/proposers.py > /tmp/proposers_REV.py
    python -m benchmarks.ngram_lookup --baseline /tmp/proposers_REV.py [--repeats 21]
        [--threads 1] [--json PATH]

1. Lookup alone (the engine's call: k = 4 drafts, n-grams of 3 down to 1; every round of every
   row that speculates by prompt lookup makes one): median microseconds per call over contexts
   of 256 to 16384 tokens, drawn from 32000 tokens (an n-gram seldom recurs: the whole context
   is searched) and from 50 (many partial matches), this revision's and the baseline's, their
   drafts checked equal.
2. A generation: the engine benchmark's random target (``benchmarks.factory``, positions up to
   2048) sampling 8 continuations of 64 tokens (temperature 0.8, seeded) by prompt lookup
   (k = 4) after one 1920-token prompt that repeats a 48-token segment
   (``workloads.repetitive_prompt``; prefilled once, its blocks shared), with this revision's
   lookup and with the baseline's (the engine's ``ngram_lookup`` swapped), alternating; the two
   ways' tokens checked equal (the same drafts). Reported: each one's median time and the ratio
   per round.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

import metagen.engine.proposers as proposers
from benchmarks import factory, workloads

LENGTHS = (256, 1024, 4096, 16384)
PROMPT, ROWS, NEW = 1920, 8, 64  # the generation: one long prompt, its samples (module docstring)
Lookup = Callable[..., list[int]]


def load_baseline(path: Path) -> Lookup:
    spec = importlib.util.spec_from_file_location("baseline_proposers", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.ngram_lookup  # type: ignore[no-any-return]


def per_call_us(fn: Lookup, tokens: list[int], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(tokens, 4, 3, 1)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def lookups(baseline: Lookup, repeats: int) -> list[dict[str, Any]]:
    rng = random.Random(0)
    rows = []
    for vocab in (32000, 50):
        for n in LENGTHS:
            tokens = [rng.randrange(vocab) for _ in range(n)]
            assert proposers.ngram_lookup(tokens, 4, 3, 1) == baseline(tokens, 4, 3, 1)
            now = per_call_us(proposers.ngram_lookup, tokens, repeats)
            old = per_call_us(baseline, tokens, repeats)
            rows.append({"vocab": vocab, "tokens": n, "this_us": round(now, 1),
                         "baseline_us": round(old, 1), "baseline_over_this": round(old / now, 2)})
            print(f"lookup: {n:6d} tokens from {vocab:5d}: this {now:8.1f} us, baseline "
                  f"{old:8.1f} us, {old / now:6.2f}x", flush=True)
    return rows


def generation(baseline: Lookup, repeats: int) -> dict[str, Any]:
    from benchmarks.peers.inprocess import MetagenPeer
    from metagen.engine.proposers import NgramProposer
    from metagen.engine.speculative_decoding import Speculator
    from metagen.types import SamplingParams

    paths = factory.build_models(factory.models_dir(None), factory.FULL, perturb=0.2)
    peer = MetagenPeer()
    peer.load({"target": paths["target"]})
    prompt = workloads.repetitive_prompt(PROMPT, factory.FULL.vocab, 5)
    params = SamplingParams(n=ROWS, temperature=0.8, seed=0, max_tokens=NEW, ignore_eos=True)
    ways = {"this": proposers.ngram_lookup, "baseline": baseline}
    times: dict[str, list[float]] = {w: [] for w in (*ways, "prefill")}
    outs: dict[str, list[list[int]]] = {}
    rounds = 0
    for r in range(repeats + 1):  # round 0 warms up, untimed
        first = peer.engine("target", num_blocks=peer.blocks_for(PROMPT + ROWS * 24))
        t0 = time.perf_counter()
        first.generate([prompt], replace(params, max_tokens=1))  # the prefill and one token
        if r:
            times["prefill"].append(time.perf_counter() - t0)
        for way in (list(ways) if r % 2 else list(ways)[::-1]):
            eng = peer.engine("target", num_blocks=peer.blocks_for(PROMPT + ROWS * (NEW + 24)),
                              speculator=Speculator(NgramProposer(max_ngram=3), 4))
            proposers.ngram_lookup = ways[way]
            try:
                t0 = time.perf_counter()
                out = eng.generate([prompt], params)
                took = time.perf_counter() - t0
            finally:
                proposers.ngram_lookup = ways["this"]
            outs[way] = [list(c.token_ids) for c in out[0].outputs]
            rounds = eng.speculator.stats.rounds
            if r:
                times[way].append(took)
        assert outs["this"] == outs["baseline"]  # the same drafts: the same seeded tokens
    ratios = [b / t for b, t in zip(times["baseline"], times["this"])]
    decode = [(b - p) / (t - p) for b, t, p in zip(times["baseline"], times["this"],
                                                    times["prefill"])]
    spread = {"median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
              "max": round(max(ratios), 3)}
    row: dict[str, Any] = {
        "prompt": PROMPT, "rows": ROWS, "new": NEW, "k": 4, "rounds": rounds,
        "prefill_s": round(statistics.median(times["prefill"]), 4),
        "decode_baseline_over_this": round(statistics.median(decode), 3),
        "this_s": round(statistics.median(times["this"]), 4),
        "baseline_s": round(statistics.median(times["baseline"]), 4),
        "baseline_over_this": spread}
    print(f"generation: {ROWS} samples of {NEW} tokens after one {PROMPT}-token prompt, prompt "
          f"lookup ({rounds} row rounds): this {row['this_s']} s, baseline {row['baseline_s']} "
          f"s, {spread['median']}x ({spread['min']}-{spread['max']}); prefill and first token "
          f"{row['prefill_s']} s, the rest {row['decode_baseline_over_this']}x", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, required=True)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    baseline = load_baseline(a.baseline)
    out = {"threads": a.threads, "repeats": a.repeats, "lookups": lookups(baseline, a.repeats),
           "generation": generation(baseline, max(3, a.repeats // 3))}
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
