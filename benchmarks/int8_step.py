"""Where the time of a quantized batch-1 decode step goes: the LM head, the native step (every
layer) over a float32 and an int8 KV cache, and the runner's whole extend (step, final norm,
head, the Python around them), for one row after ``--positions`` cached tokens (A's middle).

    python -m benchmarks.int8_step [--quantization int8|w8a8|none] [--positions 320]
                                   [--repeats 40] [--json PATH]

Every part is timed by the calling thread's CPU time (``time.thread_time``), the minimum over
interleaved repeats, at one thread: on a machine shared with other processes, wall time counts
the time slices they take and CPU time does not (what they do to the caches and the memory bus
still shows). The models are :mod:`benchmarks.factory`'s (built once into
:func:`benchmarks.factory.models_dir`).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch

from benchmarks import factory
from metagen.engine.config import Quantization
from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.interface import CausalLM
from metagen.engine.models.loader import load_model

BLOCK = 16


def _runner(model: CausalLM, kv_dtype: torch.dtype, positions: int
            ) -> tuple[ModelRunner, ExtendRequest]:
    """A runner whose cache holds a random prompt of ``positions`` tokens, and the request
    that decodes the next token (rewriting the same slot on each repeat)."""
    cfg = model.cfg
    blocks = positions // BLOCK + 1
    kv = KVCache(cfg.num_layers, blocks + 1, BLOCK, cfg.num_kv_heads, cfg.head_dim, kv_dtype,
                 "cpu")
    runner = ModelRunner(model, kv)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (positions,), generator=gen).tolist()
    table = list(range(blocks))
    runner.extend([ExtendRequest(table, 0, ids)])
    return runner, ExtendRequest(table, positions, [5])


def measure(quantization: Quantization | None, positions: int, repeats: int) -> dict[str, float]:
    """Milliseconds of CPU time per part (min over ``repeats`` interleaved rounds)."""
    torch.set_num_threads(1)
    paths = factory.build_models(factory.models_dir(),
                                 factory.FULL, perturb=0.2)
    model = load_model(paths["target"], device="cpu", quantization=quantization)
    h = torch.randn(1, model.cfg.hidden_size)
    parts: dict[str, Callable[[], object]] = {"head": lambda: model.logits(h)}
    for kv_dtype, name in ((torch.float32, "float32"), (torch.int8, "int8")):
        runner, req = _runner(model, kv_dtype, positions)
        step, plan, kv = runner.native, runner._plan([req]), runner.kv
        assert step is not None, "the native step (needs the native library)"
        # cast: mypy cannot infer a lambda with default arguments against this Callable
        parts[f"step, {name} KV"] = cast(
            "Callable[[], object]",
            lambda step=step, plan=plan, kv=kv: step(h.clone(), plan, kv.k, kv.v, scales=kv.scales))
        parts[f"extend, {name} KV"] = cast("Callable[[], object]",
                                           lambda runner=runner, req=req: runner.extend([req]))
    best = dict.fromkeys(parts, float("inf"))
    for _ in range(repeats):
        for name, fn in parts.items():
            t0 = time.thread_time()
            fn()
            best[name] = min(best[name], (time.thread_time() - t0) * 1e3)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quantization", default="int8", choices=["int8", "w8a8", "none"])
    ap.add_argument("--positions", type=int, default=320)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    quant = None if args.quantization == "none" else args.quantization
    best = measure(quant, args.positions, args.repeats)
    for name, ms in best.items():
        print(f"{name:20s} {ms:7.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"quantization": args.quantization, "positions": args.positions,
             "repeats": args.repeats, "cpu_ms_min": best}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
