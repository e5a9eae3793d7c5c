"""Do problems that share one seeded ``generate`` call get correlated samples?

    python -m benchmarks.shared_seed_correlation [--problems 200] [--seeds 0] [--chunk 50]
                                                 [--json PATH]

A seeded call gives sample ``j`` of EVERY prompt the same random stream ``(seed, j)``, as
:mod:`benchmarks.adaptive_table` does with its chunks of 50 problems. If that couples the
problems, a sample position's accuracy over a chunk (position ``j``'s share of correct samples)
varies across the 16 positions more than independent problems allow. Under independence its
variance is ``sum_i p_i (1 - p_i) / m**2`` for the chunk's ``m`` problems (``p_i``: problem i's
success rate, estimated unbiasedly from its 16 samples); this reports the ratio of the observed
variance across positions to that, per chunk (mean 1 for independent problems, its SE from the
chunks), for SC@16's samples at temperature 0.8 (max_tokens 128) seeded two ways:

- ``shared``: chunk ``i`` in one call seeded ``seed + i`` (the table's seeding);
- ``per_problem``: each problem in its own call seeded ``item_seed(seed, uid)`` (the eval
  runner's), the calls made from ``chunk`` threads so the engine still batches them.

Written to JSON; never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from metagen.eval.estimators import mean_stderr
from metagen.eval.seeds import item_seed
from metagen.types import Result, SamplingParams

TEMPERATURE = 0.8
MAX_TOKENS = 128
N = 16
MODES = ("shared", "per_problem")
DEFAULT_JSON = Path(__file__).parent / "results" / "shared_seed_correlation_cpu_2core.json"


def variance_ratio(correct: Sequence[Sequence[bool]]) -> float:
    """Observed variance of the per-position accuracy across positions over its value for
    independent problems (``correct[i][j]``: sample j of problem i is right)."""
    m, n = len(correct), len(correct[0])
    slots = [sum(row[j] for row in correct) / m for j in range(n)]
    mean = sum(slots) / n
    observed = sum((x - mean) ** 2 for x in slots) / (n - 1)
    rates = [sum(row) / n for row in correct]
    independent = sum(p * (1 - p) * n / (n - 1) for p in rates) / m ** 2
    return observed / independent if independent else float("nan")


def sample_chunk(gen: Any, prompts: list[str], uids: list[str], seed: int, mode: str
                 ) -> list[Result]:
    from metagen.strategies import self_consistency

    def params(s: int) -> SamplingParams:
        return SamplingParams(temperature=TEMPERATURE, seed=s, max_tokens=MAX_TOKENS)

    if mode == "shared":
        return as_list(self_consistency(gen, prompts, n=N, params=params(seed)))

    def one(prompt: str, uid: str) -> Result:
        return as_list(self_consistency(gen, prompt, n=N, params=params(item_seed(seed, uid))))[0]

    with ThreadPoolExecutor(len(prompts)) as pool:
        return list(pool.map(one, prompts, uids))


def as_list(res: Result | list[Result]) -> list[Result]:
    return res if isinstance(res, list) else [res]


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--json", default=str(DEFAULT_JSON))
    args = ap.parse_args(argv)
    from metagen.eval.demo import load_testbed_policy
    from metagen.testbed import format_prompt, grade, make_problems

    gen = load_testbed_policy("local")
    problems = make_problems("test", args.problems, seed=0)
    ratios: dict[str, list[float]] = {mode: [] for mode in MODES}
    seconds = {mode: 0.0 for mode in MODES}
    for seed in [int(s) for s in args.seeds.split(",")]:
        for mode in MODES:
            start = time.perf_counter()
            for i in range(0, len(problems), args.chunk):
                part = problems[i:i + args.chunk]
                res = sample_chunk(gen, [format_prompt(p) for p in part], [p.uid for p in part],
                                   seed + i, mode)
                ratios[mode].append(variance_ratio(
                    [[grade(c.text, p.answer) for c in r.candidates] for r, p in zip(res, part)]))
            seconds[mode] += time.perf_counter() - start
            print(f"seed {seed} {mode}: ratios {[round(x, 2) for x in ratios[mode]]}", flush=True)
    report = {"problems": args.problems, "seeds": args.seeds, "chunk": args.chunk,
              "temperature": TEMPERATURE, "seconds": seconds, "ratios": ratios,
              "mean_ratio": {mode: mean_stderr(ratios[mode]) for mode in MODES}}
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print("| seeding | chunks | variance ratio (mean ± SE over chunks) | seconds |")
    print("|---|---|---|---|")
    for mode in MODES:
        mean, se = report["mean_ratio"][mode]
        print(f"| {mode} | {len(ratios[mode])} | {mean:.2f} ± {se:.2f} | {seconds[mode]:.0f} |")


if __name__ == "__main__":
    main()
