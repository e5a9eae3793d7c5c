"""Where the native decode step's time goes, stage by stage: each thread's CPU time in each of a
layer's six stages (q|k|v | prefix-group attention | own attention | o | gate|up | down), the
work before the stage's wait and the wait itself, summed over the eight layers, per step.

Thread CPU time, not wall time: a thread the OS takes off its core (the machine is shared) does
not count, so on a loaded machine this is the steadier measure of what a change does to the
work; a step's wall time at two threads is about the larger thread's work plus its waits. The
library is built with ``-DMG_STAGE_CLOCK`` (decode_step.c's stage clock); ``--baseline DIR``
also builds the C files in DIR (a version that has the clock) and runs both in alternating
rounds, giving each round's ratio of the medians of total work, baseline / this.
Both builds (this checkout and ``--baseline``) take ``METAGEN_NATIVE_ISA``'s flags: ``avx2`` times
the AVX2 path on an AVX-512 machine.

``--tokens N``: N new tokens per row (5, one row: workload D's verification of four drafts).

``python -m benchmarks.step_stages [--threads 2] [--rows 1] [--tokens 1] [--rounds 16]
[--steps 40] [--baseline DIR] [--quantization int8|w8a8|int4] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from benchmarks.decode_step import _setup, binding
from benchmarks.factory import build_models, models_dir
from metagen.engine.model_runner import ExtendRequest, ModelRunner
from metagen.engine.models.llama import LlamaModel
from metagen.engine.models.loader import load_model
from metagen.engine.native.build import build
from metagen.engine.native.decode_step import DecodeStep
from metagen.engine.native.library import SOURCES, requested_flags

STAGES = ("qkv", "group attention", "own attention", "o", "gate|up", "down")
MAX_THREADS = 64  # MG_MAX_THREADS


def _clocked(folder: Path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build([folder / p.name for p in SOURCES],
                                (*requested_flags(), "-DMG_STAGE_CLOCK"))))
    if not hasattr(lib, "mg_stage_clock"):
        raise SystemExit(f"{folder}: decode_step.c has no stage clock (MG_STAGE_CLOCK)")
    return lib


def _read(lib: ctypes.CDLL, threads: int, steps: int) -> np.ndarray:
    """(threads, 2, stages) microseconds per step: work, then wait; and clears the clock."""
    buf = (ctypes.c_int64 * (MAX_THREADS * 2 * len(STAGES)))()
    lib.mg_stage_clock(buf)
    ns = np.ctypeslib.as_array(buf).reshape(MAX_THREADS, 2, len(STAGES))[:threads]
    return ns / 1e3 / steps


def measure(threads: int, rows: int, rounds: int, steps: int,
            baseline: Path | None, quantization: str | None = None,
            tokens: int = 1) -> dict[str, object]:
    torch.set_num_threads(threads)
    model = load_model(build_models(models_dir())["target"],
                       quantization=quantization)  # type: ignore[arg-type]
    assert isinstance(model, LlamaModel), "DecodeStep binds a LlamaModel's weights"
    folders = {"this": Path(SOURCES[0]).parent}
    if baseline is not None:
        folders["baseline"] = baseline
    ways: dict[str, tuple[ctypes.CDLL, ModelRunner, list[ExtendRequest], list[np.ndarray]]] = {}
    for name, folder in folders.items():
        lib = _clocked(folder)
        runner, reqs = _setup(model, rows, 512 if rows > 4 else 256, True, tokens)
        runner.native = binding(folder, lib, model) if name == "baseline" else \
            DecodeStep(lib, model)
        runner.native.threads = threads
        for _ in range(3):
            runner.extend(reqs)
        _read(lib, threads, 1)
        ways[name] = (lib, runner, reqs, [])
    ratios = []
    for r in range(rounds):
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        for name in order:
            lib, runner, reqs, per_round = ways[name]
            for _ in range(steps):
                runner.extend(reqs)
            per_round.append(_read(lib, threads, steps))
        if baseline is not None:
            ratios.append(ways["baseline"][3][-1][:, 0].sum() / ways["this"][3][-1][:, 0].sum())
    out: dict[str, object] = {"threads": threads, "rows": rows, "tokens": tokens,
                              "quantization": quantization,
                              "rounds": rounds,
                              "steps_per_round": steps}
    for name, (_, _, _, per_round) in ways.items():
        med = np.median(np.stack(per_round), axis=0)  # (threads, 2, stages), median of rounds
        out[name] = {"work_us": {s: [round(float(x), 1) for x in med[:, 0, k]]
                                 for k, s in enumerate(STAGES)},
                     "wait_us": {s: [round(float(x), 1) for x in med[:, 1, k]]
                                 for k, s in enumerate(STAGES)},
                     "total_work_us": round(float(med[:, 0].sum()), 1),
                     "total_wait_us": round(float(med[:, 1].sum()), 1)}
    if ratios:
        out["baseline_over_this_work"] = {"median": statistics.median(ratios),
                                          "min": min(ratios), "max": max(ratios)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", type=int, default=1, help="1: workload A; 4: C; 16: B's shape")
    ap.add_argument("--tokens", type=int, default=1, help="new tokens per row (at most 16)")
    ap.add_argument("--rounds", type=int, default=16)
    ap.add_argument("--steps", type=int, default=40, help="steps per round")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a folder of native C files with the stage clock, to run alternately")
    ap.add_argument("--quantization", choices=("int8", "w8a8", "int4"), default=None,
                    help="the target's projections quantized so (default: float32)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = measure(args.threads, args.rows, args.rounds, args.steps, args.baseline,
                  args.quantization, args.tokens)
    for name in ("this", "baseline"):
        if name not in res:
            continue
        r = res[name]
        assert isinstance(r, dict)
        print(f"{name}: per step, us of thread CPU time (per thread), medians of "
              f"{args.rounds} rounds")
        for s in STAGES:
            print(f"  {s:16s} work {r['work_us'][s]}  wait {r['wait_us'][s]}")
        print(f"  all threads: work {r['total_work_us']}  wait {r['total_wait_us']}")
    if "baseline_over_this_work" in res:
        q = res["baseline_over_this_work"]
        assert isinstance(q, dict)
        print(f"baseline / this, total work per round: median {q['median']:.3f}, "
              f"range {q['min']:.3f}-{q['max']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
