"""One row's own-position attention alone (a decode or verify step's, no prefix group) across
head layouts: the benchmark target's (8 query heads on 8 kv heads of 64: one query per kv head),
Llama-3-8B's (32 on 8 of 128: four per kv head) and a narrow GQA (16 on 2 of 64: eight), each
for one new token (decoding) and five (verifying four drafts), over 8 layers, each layer its own
float32 cache, the caches pushed out of L2 before every pass (a decode step meets them there
after streaming its weights).

``--baseline DIR`` times the native library built from the C files in DIR too (an older version:
``git archive REV metagen/engine/native | tar -x -C /tmp/old``); the two run interleaved, one
pass each per round, on one thread, and each case gives both medians in microseconds of process
CPU time per pass (8 layers: on a loaded machine the steadier measure of work) and the median
and range of the per-round ratios baseline / this; with a baseline the two outputs must also be
equal bit for bit (a change of loop order that keeps each query's arithmetic). ``--isa avx2``
builds both with the AVX2 path.

``python -m benchmarks.own_attention [--baseline DIR] [--isa native|avx2] [--rounds N]
[--json PATH]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time
from pathlib import Path

import torch

from benchmarks.group_attention import attention_ways
from metagen.engine.native.cpu import cpu_model
from metagen.engine.native.decode_step import StepPlan, _Model, _plan_struct

BLOCK, LAYERS = 16, 8
# (query heads, kv heads, head_dim, new tokens, cached positions)
CASES = [(8, 8, 64, 1, 256), (8, 8, 64, 5, 256), (32, 8, 128, 1, 1024), (32, 8, 128, 5, 1024),
         (16, 2, 64, 1, 512), (16, 2, 64, 5, 512)]


def _case(heads: int, kv_heads: int, head_dim: int, tokens: int, positions: int):
    """The model header, plan, queries and 8 layers' caches of one row: ``tokens`` new tokens
    after ``positions`` cached ones (their own K/V already written, as the step writes them)."""
    nblk = -(-(positions + tokens) // BLOCK)
    g = torch.Generator().manual_seed(0)
    caches = [tuple(torch.randn(nblk, BLOCK, kv_heads, head_dim, generator=g) for _ in range(2))
              for _ in range(LAYERS)]
    plan = StepPlan.build(BLOCK, [list(range(nblk))], [positions], [tokens], [])
    q = torch.randn(tokens, heads, head_dim, generator=g)
    model = _Model(heads * head_dim, heads, kv_heads, head_dim, 0, LAYERS, 1e-5,
                   head_dim ** -0.5, None, None)
    return model, _plan_struct(plan), q, caches


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path)
    ap.add_argument("--isa", choices=["native", "avx2"], default="native")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    torch.set_num_threads(1)  # the flush between passes must not leave OpenMP workers spinning
    ways = attention_ways(a.baseline, a.isa)
    flush = torch.ones(64 << 20 // 4)  # 64 MB: evicts the caches from L2 (and most of L3)
    results = []
    for case in CASES:
        model, plan, q, caches = _case(*case)
        outs = {w: torch.empty_like(q) for w in ways}

        def run(way: str) -> None:
            for kc, vc in caches:
                assert ways[way](ctypes.byref(model), ctypes.byref(plan), q.data_ptr(),
                                 q.stride(0), outs[way].data_ptr(), kc.data_ptr(),
                                 vc.data_ptr(), 1) == 0

        us: dict[str, list[float]] = {w: [] for w in ways}
        for r in range(a.rounds):
            for way in (list(ways) if r % 2 else list(ways)[::-1]):
                flush.add_(1.0)
                c0 = time.process_time()
                run(way)
                us[way].append((time.process_time() - c0) * 1e6)
        heads, kv_heads, head_dim, tokens, positions = case
        row: dict[str, object] = {"heads": heads, "kv_heads": kv_heads, "head_dim": head_dim,
                                  "tokens": tokens, "positions": positions}
        row |= {f"cpu us {w}": round(statistics.median(t), 1) for w, t in us.items()}
        if a.baseline:
            ratios = [b / n for b, n in zip(us["baseline"], us["this checkout"])]
            row |= {"speedup median": round(statistics.median(ratios), 3),
                    "speedup min": round(min(ratios), 3), "speedup max": round(max(ratios), 3),
                    "same bits": bool(torch.equal(outs["baseline"], outs["this checkout"]))}
        results.append(row)
        print(json.dumps(row))
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"cpu": cpu_model(), "isa": a.isa, "rounds": a.rounds,
                                      "layers": LAYERS, "results": results}, indent=1))


if __name__ == "__main__":
    main()
