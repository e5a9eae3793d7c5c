"""int8 products of many rows (prefill, wide batches): float32 against the int8 ways.

    python -m benchmarks.int8_prefill products [--rows 16,32,64,256,1024] [--threads 1,default]
        [--repeats 5] [--packed-max-rows 64] [--native-max-rows 64] [--avx2] [--json PATH]
    python -m benchmarks.int8_prefill prefill [--prompt 512] [--rounds 5] [--json PATH]

``products``: per model (the benchmark target of :mod:`benchmarks.factory`, and the testbed
policy), one "step" is every projection of every layer (q|k|v, o, gate|up, down; distinct
weights, so each step reads them all from memory), for M rows of activations. The ways, run
interleaved per repeat: ``float32`` (``x @ W`` over the float ``(in, out)`` weight, as the
float32 engine), ``dequantize + mm`` (:func:`~metagen.engine.models.int8.dequantized_product`,
what the int8 engine uses beyond the native kernel's rows: a float32 copy of each weight per
call), ``_weight_int8pack_mm`` (PyTorch's weight-only int8 product over the int8 ``(out, in)``
weight and float32 scales; also with the activations and scales in bfloat16, its vectorised CPU
path; both only up to ``--packed-max-rows``, as they are slow) and the ``native int8 kernel``
(:mod:`metagen.engine.native.int8_matmul`, up to ``--native-max-rows``; with ``--avx2`` its AVX2
build too, against MKL on this machine's own ISA), each also with its activations quantized to
int8 (``w8a8``: ``q8_act.c``'s int8 x int8 product). Medians (and bests) in milliseconds and each way's median over float32's
(``over_fp32``: above 1 is slower), per thread count.

``prefill``: the target's greedy generation of one token after a PROMPT-token prompt, so the time
is prefill's, for the float32 and the int8 engine, interleaved per round; medians and ratios.
Then each engine once more in a fresh process for its peak resident set (``VmHWM``, reset after
loading and a short warm-up) over the resident set then: what the prefill itself adds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import factory
from benchmarks.memory import _peak_bytes, _rss_bytes
from benchmarks.thread_counts import thread_counts
from metagen.engine.models import int8
from metagen.engine.native.build import AVX2_FLAGS
from metagen.engine.native.int8_matmul import Int8Matmul, load_from
from metagen.engine.native.int8_matmul import load as load_int8_matmul

POLICY = Path(__file__).resolve().parents[1] / "metagen" / "testbed" / "models" / "policy"
FP32 = "float32"
DEQUANT = "dequantize + mm"
PACKED = "_weight_int8pack_mm"
PACKED_BF16 = "_weight_int8pack_mm, bfloat16 x"
NATIVE = "native int8 kernel"
NATIVE_AVX2 = "native int8 kernel, AVX2 build"
NATIVE_A8 = "native int8 x int8 kernel (w8a8)"
NATIVE_A8_AVX2 = "native int8 x int8 kernel (w8a8), AVX2 build"


def shapes(hidden: int, heads: int, kv_heads: int, head_dim: int, ffn: int,
           layers: int) -> list[tuple[int, int]]:
    """(in, out) of every projection of a Llama's layers: q|k|v, o, gate|up, down per layer."""
    qkv = (heads + 2 * kv_heads) * head_dim
    return [(hidden, qkv), (heads * head_dim, hidden), (hidden, 2 * ffn), (ffn, hidden)] * layers


def models() -> dict[str, list[tuple[int, int]]]:
    """The products' models: the benchmark target and the testbed policy."""
    s = factory.FULL
    cfg = json.loads((POLICY / "config.json").read_text())
    return {"target": shapes(s.hidden, s.heads, s.heads, s.hidden // s.heads, s.ffn, s.layers),
            "testbed policy": shapes(cfg["hidden_size"], cfg["num_attention_heads"],
                                     cfg["num_key_value_heads"], cfg["head_dim"],
                                     cfg["intermediate_size"], cfg["num_hidden_layers"])}


def _ways(rows: int, packed_max: int, native_max: int, avx2: Int8Matmul | None
          ) -> dict[str, Callable[[torch.Tensor, Any], torch.Tensor]]:
    ways: dict[str, Callable[[torch.Tensor, Any], torch.Tensor]] = {
        FP32: lambda x, w: torch.mm(x, w[0]),
        DEQUANT: lambda x, w: int8.dequantized_product(x, w[1], w[2]),
    }
    if rows <= packed_max:
        ways[PACKED] = lambda x, w: torch.ops.aten._weight_int8pack_mm(x, w[1], w[2])
        ways[PACKED_BF16] = lambda x, w: torch.ops.aten._weight_int8pack_mm(
            x.to(torch.bfloat16), w[1], w[3]).float()
    kernel = load_int8_matmul()
    if kernel is not None and rows <= native_max:
        ways[NATIVE] = lambda x, w: kernel(x, w[1], w[2])
        ways[NATIVE_A8] = lambda x, w: kernel(x, w[1], w[2], quantize_activations=True)
    if avx2 is not None and rows <= native_max:
        ways[NATIVE_AVX2] = lambda x, w: avx2(x, w[1], w[2])
        ways[NATIVE_A8_AVX2] = lambda x, w: avx2(x, w[1], w[2], quantize_activations=True)
    return ways


def measure_products(shape_list: list[tuple[int, int]], rows: list[int], threads: int,
                     repeats: int, packed_max: int, native_max: int,
                     avx2: Int8Matmul | None = None) -> list[dict[str, Any]]:
    """Per row count: each way's milliseconds per step on ``threads`` threads (every round's,
    the median and the best) and each way's median over float32's (``over_fp32``: above 1 is
    slower)."""
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    weights = []
    for k, n in shape_list:
        w = torch.randn(k, n, generator=g) / k ** 0.5
        q, scale = int8.quantize_int8(w.t())
        weights.append((w.contiguous(), q, scale, scale.to(torch.bfloat16)))
    out = []
    for m in rows:
        xs = {k: torch.randn(m, k, generator=g) for k in {k for k, _ in shape_list}}
        ways = _ways(m, packed_max, native_max, avx2)
        times: dict[str, list[float]] = {name: [] for name in ways}
        for rep in range(repeats + 1):  # the first round warms up and is not kept
            for name, fn in ways.items():
                t0 = time.perf_counter()
                for w in weights:
                    fn(xs[w[0].shape[0]], w)
                if rep:
                    times[name].append((time.perf_counter() - t0) * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        out.append({"rows": m, "threads": threads, "median_ms": med, "times_ms": times,
                    "best_ms": {name: min(v) for name, v in times.items()},
                    "over_fp32": {name: med[name] / med[FP32] for name in med}})
    return out


VARIANTS = ("float32", "int8")


def _target() -> Path:
    return factory.build_models(factory.models_dir(),
                                factory.FULL, perturb=0.2)["target"]


def _peer(variant: str) -> Any:
    from benchmarks.peers.inprocess import MetagenInt8Peer, MetagenPeer

    peer = MetagenPeer() if variant == "float32" else MetagenInt8Peer()
    peer.load({"target": _target()})
    return peer


def _run(peer: Any, prompt: list[int]) -> float:
    t0 = time.perf_counter()
    peer.greedy("target", prompt, 1)
    return time.perf_counter() - t0


def measure_prefill(prompt_len: int, rounds: int) -> dict[str, Any]:
    """Interleaved prefill times of the variants, then each one's peak memory in a fresh
    process (:func:`peak_memory`)."""
    prompt = [3 + i % 500 for i in range(prompt_len)]
    peers = {v: _peer(v) for v in VARIANTS}
    for v in VARIANTS:
        _run(peers[v], prompt[:32])  # warm-up: the native library, first allocations
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(rounds):
        for v in VARIANTS:
            times[v].append(_run(peers[v], prompt))
    med = {v: statistics.median(t) for v, t in times.items()}
    memory = {}
    for v in VARIANTS:
        res = subprocess.run([sys.executable, "-m", "benchmarks.int8_prefill", "peak", v,
                              str(prompt_len)], capture_output=True, text=True, check=True)
        memory[v] = json.loads(res.stdout.strip().splitlines()[-1])
    return {"prompt": prompt_len, "threads": torch.get_num_threads(), "times_s": times,
            "median_s": med,
            "int8_over_fp32": med["int8"] / med["float32"],
            "per_round_ratio": [a / b for a, b in zip(times["int8"], times["float32"])],
            "memory": memory}


def peak_memory(variant: str, prompt_len: int) -> dict[str, int]:
    """In this (fresh) process: the resident set after loading the variant's engine and a
    32-token warm-up, and the peak resident set during one PROMPT-token prefill (the peak is
    reset after the warm-up: quantizing at load peaks higher, with the float weights and their
    int8 copies both resident)."""
    prompt = [3 + i % 500 for i in range(prompt_len)]
    peer = _peer(variant)
    _run(peer, prompt[:32])
    loaded = _rss_bytes()
    Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := the current resident set
    _run(peer, prompt)
    peak = _peak_bytes()
    return {"rss_loaded_bytes": loaded, "peak_bytes": peak, "prefill_adds_bytes": peak - loaded}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=["products", "prefill", "peak"])
    p.add_argument("args", nargs="*", help="peak only: VARIANT PROMPT")
    p.add_argument("--rows", default="16,32,64,256,1024")
    p.add_argument("--threads", default="1,default")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--packed-max-rows", type=int, default=64,
                   help="time _weight_int8pack_mm up to this many rows (it is slow on CPU)")
    p.add_argument("--native-max-rows", type=int, default=64)
    p.add_argument("--avx2", action="store_true",
                   help="also time the native kernel's AVX2 build (MKL keeps its own ISA)")
    p.add_argument("--json", type=Path)
    a = p.parse_args(argv)
    if a.what == "peak":
        print(json.dumps(peak_memory(a.args[0], int(a.args[1]))))
        return 0
    result: dict[str, Any] = {"cpu": os.uname().machine, "torch": torch.__version__,
                              "load_average": os.getloadavg()}
    if a.what == "products":
        rows = [int(r) for r in a.rows.split(",")]
        avx2 = load_from(AVX2_FLAGS) if a.avx2 else None
        result["products"] = {
            name: [r for t in thread_counts(a.threads)
                   for r in measure_products(sl, rows, t, a.repeats, a.packed_max_rows,
                                              a.native_max_rows, avx2)]
            for name, sl in models().items()}
    else:
        result["prefill"] = measure_prefill(a.prompt, a.rounds)
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        a.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
