"""metagen at one thread and at torch's default thread count, before and after a change.

    python -m benchmarks.thread_scaling [--before TREE] [--rounds 3] [--workloads AB] [--json PATH]

Each configuration (tree x threads) is one fresh ``python -m benchmarks.engine_bench`` process
with metagen as its only peer; the configurations run interleaved, round after round, so a load
that comes and goes on a shared machine hits them alike. One thread is ``OMP_NUM_THREADS=1
MKL_NUM_THREADS=1``; the default is torch's own count. ``--before TREE`` is a checkout of the
older code (``git archive <rev> | tar -x -C TREE``): its ``metagen`` package runs under this
checkout's harness. Reports each workload's medians over rounds (A: decode tok/s; B: tok/s) and
the default-threads / one-thread ratio per tree. Timings are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def under_this_harness(before: Path, dest: Path) -> Path:
    """``dest``: a copy of the checkout ``before`` (without its environments and history) whose
    ``benchmarks`` is this checkout's, so the older ``metagen`` runs under today's harness."""
    shutil.copytree(before, dest, ignore=shutil.ignore_patterns(
        ".venv", ".peers", ".git", "benchmarks"))
    shutil.copytree(HERE / "benchmarks", dest / "benchmarks")
    return dest


def _metric(row: dict[str, Any]) -> float:
    """A's decode tok/s (the benchmark's roofline-comparable number), else tok/s."""
    return float(row["decode_tok_s"]["median"] if "decode_tok_s" in row else row["tokens_per_s"])


def _one(tree: Path, threads: str, workloads: str, out: Path) -> dict[str, Any]:
    env = {**os.environ, "METAGEN_BENCH_PEERS": "metagen"}
    env.pop("OMP_NUM_THREADS", None)
    env.pop("MKL_NUM_THREADS", None)
    if threads == "1":
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "benchmarks.engine_bench", "--workloads", workloads,
                    "--repeats", "1", "--threads", "default", "--json", str(out)], cwd=tree,
                   env=env, check=True,
                   stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    return {"threads": result["meta"]["threads"][0],
            "roofline_tok_s": result["roofline"]["decode_roofline_tok_s"],
            **{r["workload"]: _metric(r) for r in result["rows"] if r["peer"] == "metagen"}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", type=Path, help="a checkout of the older code")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workloads", default="AB")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    trees = {"after": HERE}
    work = Path(tempfile.mkdtemp(prefix="thread-scaling-"))
    if args.before:  # the older metagen under this harness: same workloads, same measurement
        trees = {"before": under_this_harness(args.before, work / "before"), **trees}
    runs: list[dict[str, Any]] = []
    for rnd in range(args.rounds):
        for name, tree in trees.items():
            for threads in ("1", "default"):
                r = _one(tree, threads, args.workloads, work / f"{name}-{threads}-{rnd}.json")
                runs.append({"tree": name, "threads_setting": threads, "round": rnd, **r})
                print(json.dumps(runs[-1]), flush=True)
    summary: dict[str, Any] = {}
    for name in trees:
        for wl in args.workloads:
            med = {t: statistics.median(r[wl] for r in runs if r["tree"] == name
                                        and r["threads_setting"] == t and wl in r)
                   for t in ("1", "default")}
            summary[f"{name} {wl}"] = {"one_thread": med["1"], "default": med["default"],
                                       "default_over_one": med["default"] / med["1"]}
    out = {"command": " ".join(sys.argv), "runs": runs, "medians": summary}
    print(json.dumps(summary, indent=1))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
