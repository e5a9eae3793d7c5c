"""One int4 product, one activation row, one thread: metagen's kernel (``q4.c``) against
onnxruntime's ``MatMulNBits`` (bits 4, block 32, ``accuracy_level`` 4: int8 activations, the
node onnxruntime-genai's int4 models are made of), on the benchmark target's shapes.

    python -m benchmarks.int4_kernel [--rounds 3] [--copies 16] [--calls 200] [--json PATH]

Each shape (K inputs -> N outputs: q|k|v, o, gate|up, down, the LM head; and "call", 16
outputs, which is mostly each call's fixed cost: the decode step calls the kernel from C and
does not pay metagen's Python part of it) is held in ``--copies``
distinct random weights, called in turn, so the weights stream from memory as a model's do (a
single copy of most shapes would sit in L2). onnxruntime runs in its peer's environment
(``.peers/onnxruntime-genai``, ``bash benchmarks/setup_peers.sh onnxruntime-genai``): one graph
per shape with ``--copies`` nodes on the same input, each with its own weight, so one
``run`` call amortises Python's overhead over the copies; ``intra_op_num_threads=1``. Rounds
alternate metagen and onnxruntime. Reports the best round's time per product, the weight
stream it reads (GB/s, packed nibbles and float32 scales as each stores them: onnxruntime's
scales are one float per 32 weights too), and ns per block (one channel's 32 inputs) with the
same in cycles at the clock ``/proc/cpuinfo`` reports. Reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HIDDEN, FFN, VOCAB = 512, 1376, 32000  # benchmarks.factory.FULL
# name: (K, N); "call": one group of 16 channels, nearly all a call's fixed cost (metagen's:
# Python, ctypes, the output tensor, quantizing the row; onnxruntime's: a node inside a graph)
SHAPES = {"call": (HIDDEN, 16), "qkv": (HIDDEN, 3 * HIDDEN), "o": (HIDDEN, HIDDEN),
          "gate|up": (HIDDEN, 2 * FFN), "down": (FFN, HIDDEN), "head": (HIDDEN, VOCAB)}
ROOT = Path(__file__).resolve().parent.parent

ORT_SCRIPT = r'''
import json, sys, time
import numpy as np
import onnx
from onnx import TensorProto, helper
import onnxruntime as ort

shapes, copies, calls = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
out = {}
for name, (k, n) in shapes.items():
    blocks = (k + 31) // 32
    inits, nodes, outs = [], [], []
    for c in range(copies):
        b = rng.integers(0, 256, size=(n, blocks, 16), dtype=np.uint8)
        s = (rng.random(n * blocks, dtype=np.float32) * 0.01).astype(np.float32)
        inits += [helper.make_tensor(f"B{c}", TensorProto.UINT8, b.shape, b.tobytes(), raw=True),
                  helper.make_tensor(f"S{c}", TensorProto.FLOAT, s.shape, s.tobytes(), raw=True)]
        nodes.append(helper.make_node("MatMulNBits", ["A", f"B{c}", f"S{c}"], [f"Y{c}"],
                                      domain="com.microsoft", K=k, N=n, bits=4, block_size=32,
                                      accuracy_level=4))
        outs.append(helper.make_tensor_value_info(f"Y{c}", TensorProto.FLOAT, [1, n]))
    graph = helper.make_graph(nodes, name, [helper.make_tensor_value_info(
        "A", TensorProto.FLOAT, [1, k])], outs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 9  # what this onnxruntime reads (the onnx package may write newer)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    a = {"A": rng.standard_normal((1, k), dtype=np.float32)}
    for _ in range(3):
        sess.run(None, a)
    reps = max(1, calls // copies)
    t = time.perf_counter()
    for _ in range(reps):
        sess.run(None, a)
    out[name] = (time.perf_counter() - t) / (reps * copies)
print(json.dumps(out))
'''


def _ours(copies: int, calls: int) -> dict[str, float]:
    """Seconds per product of metagen's kernel, one row, one thread, per shape."""
    import torch

    from metagen.engine.models.int4 import Int4Weight
    from metagen.engine.native.int4_matmul import load

    kernel = load()
    if kernel is None:
        raise SystemExit("no native int4 kernel on this machine")
    torch.manual_seed(0)
    out = {}
    for name, (k, n) in SHAPES.items():
        ws = [Int4Weight.from_in_out(torch.randn(k, n) * 0.02) for _ in range(copies)]
        x = torch.randn(1, k)
        for w in ws[:3]:
            kernel(x, w.packed, w.ws, n, threads=1)
        reps = max(1, calls // copies)
        t = time.perf_counter()
        for _ in range(reps):
            for w in ws:
                kernel(x, w.packed, w.ws, n, threads=1)
        out[name] = (time.perf_counter() - t) / (reps * copies)
    return out


def _ort(copies: int, calls: int) -> dict[str, float] | None:
    python = ROOT / ".peers" / "onnxruntime-genai" / "bin" / "python"
    if not python.is_file():
        return None
    res = subprocess.run([str(python), "-c", ORT_SCRIPT, json.dumps(SHAPES), str(copies),
                          str(calls)], check=True, capture_output=True, text=True)
    return {k: float(v) for k, v in json.loads(res.stdout.strip().splitlines()[-1]).items()}


def _mhz() -> float | None:
    """The first processor's ``cpu MHz`` (None where the file or field is missing)."""
    from metagen.cpuinfo import cpuinfo_fields

    mhz = cpuinfo_fields().get("cpu MHz")
    return float(mhz) if mhz else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--copies", type=int, default=16)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    best: dict[str, dict[str, float]] = {"metagen": {}, "onnxruntime": {}}
    for _ in range(args.rounds):
        for peer, fn in (("metagen", _ours), ("onnxruntime", _ort)):
            got = fn(args.copies, args.calls)
            if got is None:
                print("onnxruntime: not installed (bash benchmarks/setup_peers.sh "
                      "onnxruntime-genai)")
                continue
            for shape, sec in got.items():
                best[peer][shape] = min(best[peer].get(shape, sec), sec)
    mhz = _mhz()
    rows: list[dict[str, Any]] = []
    print(f"one row, one thread, best of {args.rounds} rounds; cycles at {mhz} MHz")
    print(f"{'shape':8s} {'K x N':>11s} | {'peer':11s} {'us':>7s} {'GB/s':>6s} "
          f"{'ns/block':>8s} {'cyc/block':>9s} | metagen / onnxruntime")
    for name, (k, n) in SHAPES.items():
        blocks = n * ((k + 31) // 32)
        stream = blocks * (16 + 4)  # 32 nibbles and one float32 scale per block
        for peer in best:
            if name not in best[peer]:
                continue
            s = best[peer][name]
            row = {"shape": name, "K": k, "N": n, "peer": peer, "us": s * 1e6,
                   "gb_s": stream / s / 1e9, "ns_per_block": s * 1e9 / blocks,
                   "cycles_per_block": s * 1e6 * mhz / blocks if mhz else None}
            rows.append(row)
            ratio = (f"{best['onnxruntime'][name] / s:.2f}x" if peer == "metagen"
                     and name in best["onnxruntime"] else "")
            cyc = f"{row['cycles_per_block']:9.2f}" if mhz else f"{'-':>9s}"
            print(f"{name:8s} {f'{k}x{n}':>11s} | {peer:11s} {row['us']:7.1f} "
                  f"{row['gb_s']:6.1f} {row['ns_per_block']:8.3f} {cyc} | {ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps({"mhz": mhz, "rounds": args.rounds,
                                               "copies": args.copies, "rows": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
