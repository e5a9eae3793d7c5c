"""One decode step of the benchmark target: the PyTorch path against the native decode step.

Each scenario is a step of the engine's :class:`~metagen.engine.model_runner.ModelRunner` (all
layers and the head) over a prefilled paged KV cache, as workloads A-C run it: one row after a
256-token prompt (A), four beams after 256 (C), sixteen samples sharing a 512-token prompt
(B, through Hydragen). Both paths run interleaved in one process on one thread (or
``--threads``: torch's products and the native step alike); the table gives
the best of a few repeats, the speedup, and the floor: the same step's products alone
(``benchmarks.small_matmul``'s native kernel, or MKL for one row), which no implementation that
streams fp32 weights can beat. ``python -m benchmarks.decode_step [--threads N] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks.factory import build_models
from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.loader import load_model
from metagen.engine.native import load_small_matmul

BLOCK = 16
SCENARIOS = {"A: 1 row, 256 cached": (1, 256), "C: 4 beams sharing 256": (4, 256),
             "B: 16 samples sharing 512": (16, 512)}  # rows, prompt tokens


def _setup(model, rows: int, prompt: int, native: bool) -> tuple[ModelRunner, list]:
    """A runner whose cache holds the prompt once, its blocks shared by every row (forked from
    it), plus one own block per row; returns it and the step's requests."""
    cfg = model.cfg
    nblk = prompt // BLOCK
    kv = KVCache(cfg.num_layers, rows * (nblk + 2) + 2, BLOCK, cfg.num_kv_heads, cfg.head_dim,
                 torch.float32, "cpu")
    runner = ModelRunner(model, kv, native=native)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (prompt,), generator=g).tolist()
    shared = list(range(nblk))
    runner.extend([ExtendRequest(shared, 0, ids)])
    tables = [shared + [nblk + r] for r in range(rows)]
    return runner, [ExtendRequest(t, prompt, [int(ids[r])]) for r, t in enumerate(tables)]


def measure(repeats: int = 7, threads: int = 1) -> list[dict[str, float | str]]:
    torch.set_num_threads(threads)
    paths = build_models(Path("/tmp/metagen-bench-models"))
    model = load_model(paths["target"])
    kernel = load_small_matmul()
    out = []
    for name, (rows, prompt) in SCENARIOS.items():
        ways = {"pytorch": _setup(model, rows, prompt, False),
                "native": _setup(model, rows, prompt, True)}
        xs = [torch.randn(rows, w.shape[0]) for w in _weights(model)]

        def products() -> None:
            for x, w in zip(xs, _weights(model)):
                kernel(x, w) if kernel and kernel.applies(x, w, None) else torch.mm(x, w)

        best = dict.fromkeys([*ways, "products"], float("inf"))
        for _ in range(repeats):
            for way, (runner, reqs) in ways.items():
                t0 = time.perf_counter()
                runner.extend(reqs)  # rewrites the same positions each repeat
                best[way] = min(best[way], (time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()
            products()
            best["products"] = min(best["products"], (time.perf_counter() - t0) * 1e3)
        out.append({"scenario": name, **best})
    return out


def _weights(model) -> list[torch.Tensor]:
    head = model.lm_head if model.lm_head is not None else model.embed.t()
    return [w for layer in model.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)
            ] + [head]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    rows = measure(args.repeats, args.threads)
    print("scenario | pytorch ms | native ms | native speedup | products alone ms | "
          "native / products")
    for r in rows:
        print(f"{r['scenario']} | {r['pytorch']:.1f} | {r['native']:.1f} | "
              f"{r['pytorch'] / r['native']:.2f}x | {r['products']:.1f} | "
              f"{r['native'] / r['products']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"threads": args.threads, "ms_per_step": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
