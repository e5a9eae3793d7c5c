"""One decode step of the benchmark target: the PyTorch path against the native decode step.

Each scenario is a step of the engine's :class:`~metagen.engine.model_runner.ModelRunner` (all
layers and the head) over a prefilled paged KV cache, as workloads A-C run it: one row after a
256-token prompt (A), four beams after 256 (C), sixteen samples sharing a 512-token prompt
(B, through Hydragen), and workload D's verification of four drafts: five new tokens of one row
after 256 (D). Both paths run interleaved in one process on one thread (or
``--threads``: torch's products and the native step alike); the table gives
the best of a few repeats, the speedup, and the floor: the same step's products alone
(``benchmarks.small_matmul``'s native kernel, or MKL for one row), which no implementation that
streams fp32 weights can beat. ``--baseline DIR`` also runs the native step built from the C
files in DIR (an older version: ``git archive REV metagen/engine/native | tar -x -C /tmp/old``),
interleaved with the others, and gives each repeat's ratio baseline / native (median and range),
so a change is measured against its predecessor under the same load; by wall clock and by the
process's CPU time (all threads: on a loaded machine the steadier measure of work). The baseline
is bound through DIR's own ``decode_step.py`` where DIR has one (its C structs may differ).
Both builds (this checkout and ``--baseline``) take ``METAGEN_NATIVE_ISA``'s flags: ``avx2`` times
the AVX2 path on an AVX-512 machine.

``python -m benchmarks.decode_step [--threads N] [--json PATH] [--baseline DIR] [--scenarios ABCD]``.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.factory import build_models, models_dir
from metagen.engine.kv_cache import KVCache
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.loader import load_model
from metagen.engine.native import load_small_matmul
from metagen.engine.native.build import build
from metagen.engine.native.decode_step import DecodeStep
from metagen.engine.native.library import SOURCES, requested_flags

BLOCK = 16
SCENARIOS = {"A: 1 row, 256 cached": (1, 256, 1), "C: 4 beams sharing 256": (4, 256, 1),
             "B: 16 samples sharing 512": (16, 512, 1),
             "D: 5 tokens of 1 row after 256": (1, 256, 5)}  # rows, prompt, new tokens per row


def _setup(model, rows: int, prompt: int, native: bool,
           tokens: int = 1) -> tuple[ModelRunner, list]:
    """A runner whose cache holds the prompt once, its blocks shared by every row (forked from
    it), plus one own block per row; returns it and the step's requests: ``tokens`` (at most a
    block) new tokens per row."""
    assert 1 <= tokens <= BLOCK, tokens
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
    return runner, [ExtendRequest(t, prompt, [int(i) for i in ids[r:r + tokens]])
                    for r, t in enumerate(tables)]


def measure(repeats: int = 7, threads: int = 1, baseline: Path | None = None,
            scenarios: str = "ABCD") -> list[dict[str, Any]]:
    torch.set_num_threads(threads)
    paths = build_models(models_dir())
    model = load_model(paths["target"])
    kernel = load_small_matmul()
    old = ctypes.CDLL(str(build([baseline / p.name for p in SOURCES], requested_flags()))) \
        if baseline else None
    out = []
    for name, (rows, prompt, tokens) in SCENARIOS.items():
        if name[0] not in scenarios:
            continue
        ways = {"pytorch": _setup(model, rows, prompt, False, tokens),
                "native": _setup(model, rows, prompt, True, tokens)}
        if old is not None:
            assert baseline is not None  # old is built from it
            ways["baseline"] = _setup(model, rows, prompt, True, tokens)
            ways["baseline"][0].native = binding(baseline, old, model)
        xs = [torch.randn(rows * tokens, w.shape[0]) for w in _weights(model)]

        def products() -> None:
            for x, w in zip(xs, _weights(model)):
                kernel(x, w) if kernel and kernel.applies(x, w, None) else torch.mm(x, w)

        best = dict.fromkeys([*ways, "products"], float("inf"))
        ratios, cpu_ratios = [], []
        for i in range(repeats):
            ms, cpu = {}, {}
            for way, (runner, reqs) in (ways.items() if i % 2 == 0 else
                                        reversed(ways.items())):
                t0, c0 = time.perf_counter(), time.process_time()
                runner.extend(reqs)  # rewrites the same positions each repeat
                ms[way] = (time.perf_counter() - t0) * 1e3
                cpu[way] = time.process_time() - c0
                best[way] = min(best[way], ms[way])
            if old is not None:
                ratios.append(ms["baseline"] / ms["native"])
                cpu_ratios.append(cpu["baseline"] / cpu["native"])
            t0 = time.perf_counter()
            products()
            best["products"] = min(best["products"], (time.perf_counter() - t0) * 1e3)
        row: dict[str, Any] = {"scenario": name, **best}  # the name, then milliseconds
        if ratios:
            row |= {"baseline_over_native_median": statistics.median(ratios),
                    "baseline_over_native_min": min(ratios),
                    "baseline_over_native_max": max(ratios),
                    "cpu_baseline_over_native_median": statistics.median(cpu_ratios),
                    "cpu_baseline_over_native_min": min(cpu_ratios),
                    "cpu_baseline_over_native_max": max(cpu_ratios)}
        out.append(row)
    return out


def binding(folder: Path, lib: ctypes.CDLL, model) -> DecodeStep:
    """The decode step over ``lib``, built from the C files in ``folder``, through the
    ``DecodeStep`` of ``folder/decode_step.py`` where there is one (an older version's C structs
    may differ from this one's), else this version's."""
    path = folder / "decode_step.py"
    if not path.exists():
        return DecodeStep(lib, model)
    spec = importlib.util.spec_from_file_location(f"_baseline_{abs(hash(folder))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module.DecodeStep(lib, model)


def _weights(model) -> list[torch.Tensor]:
    head = model.lm_head if model.lm_head is not None else model.embed.t()
    return [w for layer in model.layers for w in (layer.qkv, layer.o, layer.gate_up, layer.down)
            ] + [head]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a folder of older native C files to time interleaved")
    ap.add_argument("--scenarios", default="ABCD", help="which of A, B, C, D to run")
    args = ap.parse_args(argv)
    rows = measure(args.repeats, args.threads, args.baseline, args.scenarios)
    print("scenario | pytorch ms | native ms | native speedup | products alone ms | "
          "native / products")
    for r in rows:
        print(f"{r['scenario']} | {r['pytorch']:.1f} | {r['native']:.1f} | "
              f"{r['pytorch'] / r['native']:.2f}x | {r['products']:.1f} | "
              f"{r['native'] / r['products']:.2f}")
        if "baseline" in r:
            print(f"  baseline native {r['baseline']:.1f} ms; baseline / native per repeat: "
                  f"median {r['baseline_over_native_median']:.3f}, range "
                  f"{r['baseline_over_native_min']:.3f}-{r['baseline_over_native_max']:.3f}; "
                  f"by CPU time median {r['cpu_baseline_over_native_median']:.3f}, range "
                  f"{r['cpu_baseline_over_native_min']:.3f}-"
                  f"{r['cpu_baseline_over_native_max']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"threads": args.threads, "baseline": str(args.baseline) if args.baseline else None,
             "ms_per_step": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
