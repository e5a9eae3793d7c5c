"""Adaptive meta-generation on the testbed: each adaptive method against its fixed-budget twin.

    python -m benchmarks.adaptive_table [--problems 200] [--seed 0] [--chunk 50]
                                        [--only NAME,...] [--json PATH]

Rows (all on the same ``make_problems("test", P, seed=0)`` problems, temperature 0.8, one seeded
run each): self-consistency at N=16 and adaptive self-consistency (Beta rule at 0.95, batches of
4; ESC's window rule, window 4); DeepConf offline (16 full traces, keep the top 10 %) and online
(4 warm-up traces, then 12 stopped at the threshold; and with the consensus stop at 0.95 in
waves of 4); PRM step beam search and DVTS at 16 samples per step and particle filtering with 16,
8 and 4 particles (softmax temperature 0.1, resampling at ESS < N/2); their process reward is the
demo's default, the testbed verifier's (ORM model's) confidence in the solution so far.

Each row reports accuracy with its standard error, mean generated tokens per problem, and against
its twin the token saving (twin tokens / row tokens) and the paired accuracy difference with its
standard error (per-problem differences, so shared difficulty cancels). Results are written after
every row, so an interrupted run keeps what it measured. Never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from metagen.eval.estimators import mean_stderr
from metagen.strategies import (
    adaptive_self_consistency,
    deepconf,
    dvts,
    particle_filtering,
    self_consistency,
    step_beam_search,
)
from metagen.strategies.steps import StepDefinition
from metagen.types import Result, SamplingParams

TEMPERATURE = 0.8
STEPS = StepDefinition(max_step_tokens=48)
DEPTH = 10
DEFAULT_JSON = Path(__file__).parent / "results" / "adaptive_testbed_cpu_2core.json"

Runner = Callable[[Any, Any, list[str], int], list[Result]]


def _as_list(res: Result | list[Result]) -> list[Result]:
    return res if isinstance(res, list) else [res]


def _params(seed: int, max_tokens: int | None = None) -> SamplingParams:
    p = SamplingParams(temperature=TEMPERATURE, seed=seed)
    return p if max_tokens is None else p.with_(max_tokens=max_tokens)


#: name -> (twin or None, runner(generator, prm, prompts, seed))
ROWS: dict[str, tuple[str | None, Runner]] = {
    "self_consistency@16": (None, lambda g, prm, ps, s: _as_list(self_consistency(
        g, ps, n=16, params=_params(s, 128)))),
    "adaptive_sc_beta@16": ("self_consistency@16", lambda g, prm, ps, s: _as_list(
        adaptive_self_consistency(g, ps, n=16, batch=4, confidence=0.95,
                                  params=_params(s, 128)))),
    "adaptive_sc_window@16": ("self_consistency@16", lambda g, prm, ps, s: _as_list(
        adaptive_self_consistency(g, ps, n=16, batch=4, rule="window", window=4,
                                  params=_params(s, 128)))),
    "deepconf_offline@16": (None, lambda g, prm, ps, s: deepconf(
        g, ps, n=16, warmup=16, keep=0.1, window=8, params=_params(s), steps=STEPS,
        max_depth=DEPTH)),
    "deepconf_online@16": ("deepconf_offline@16", lambda g, prm, ps, s: deepconf(
        g, ps, n=16, warmup=4, keep=0.1, window=8, params=_params(s), steps=STEPS,
        max_depth=DEPTH)),
    "deepconf_online_consensus@16": ("deepconf_offline@16", lambda g, prm, ps, s: deepconf(
        g, ps, n=16, warmup=4, keep=0.1, window=8, wave=4, consensus=0.95, params=_params(s),
        steps=STEPS, max_depth=DEPTH)),
    "step_beam@16": (None, lambda g, prm, ps, s: step_beam_search(
        g, ps, prm, width=4, branching=4, params=_params(s), steps=STEPS, max_depth=DEPTH)),
    "dvts@16": (None, lambda g, prm, ps, s: dvts(
        g, ps, prm, subtrees=4, branching=4, params=_params(s), steps=STEPS, max_depth=DEPTH)),
    "particle_filtering@16": ("step_beam@16", lambda g, prm, ps, s: particle_filtering(
        g, ps, prm, particles=16, temperature=0.1, params=_params(s), steps=STEPS,
        max_depth=DEPTH)),
    "particle_filtering@8": ("step_beam@16", lambda g, prm, ps, s: particle_filtering(
        g, ps, prm, particles=8, temperature=0.1, params=_params(s), steps=STEPS,
        max_depth=DEPTH)),
    "particle_filtering@4": ("step_beam@16", lambda g, prm, ps, s: particle_filtering(
        g, ps, prm, particles=4, temperature=0.1, params=_params(s), steps=STEPS,
        max_depth=DEPTH)),
}


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(mean of a - b, its standard error) over paired per-problem values."""
    return mean_stderr([x - y for x, y in zip(a, b)])


#: rows replayed on self-consistency@16's own samples (name -> stopping rule options): the
#: samples adaptive SC would have drawn, in index order, in rounds of 4 — the stopping rule's
#: cost without the sampling noise of a second run
REPLAYS: dict[str, dict[str, Any]] = {
    "adaptive_sc_beta@16 (replay)": {"rule": "beta", "confidence": 0.95},
    "adaptive_sc_window@16 (replay)": {"rule": "window", "window": 4}}


def row_of(name: str, twin: str | None, correct: list[float], tokens: list[int],
           seconds: float) -> dict[str, Any]:
    acc, se = mean_stderr(correct)
    return {"name": name, "twin": twin, "problems": len(correct), "accuracy": acc,
            "accuracy_se": se, "mean_tokens": sum(tokens) / len(tokens), "seconds": seconds,
            "correct": correct, "tokens": tokens}


def run_row(name: str, generator: Any, prm: Any, problems: list[Any], seed: int,
            chunk: int) -> tuple[dict[str, Any], list[Result]]:
    from metagen.testbed import format_prompt, grade
    runner = ROWS[name][1]
    correct: list[float] = []
    tokens: list[int] = []
    kept: list[Result] = []
    start = time.perf_counter()
    for i in range(0, len(problems), chunk):
        part = problems[i:i + chunk]
        results = runner(generator, prm, [format_prompt(p) for p in part], seed + i)
        kept += results
        for r, p in zip(results, part):
            correct.append(float(bool(r.best is not None and grade(r.text, p.answer))))
            tokens.append(r.usage.generated_tokens)
    return row_of(name, ROWS[name][0], correct, tokens, time.perf_counter() - start), kept


def replay_row(name: str, sc_results: list[Result], problems: list[Any]) -> dict[str, Any]:
    """Adaptive SC replayed on self-consistency's samples (see :data:`REPLAYS`)."""
    from metagen.strategies import SelfConsistency
    from metagen.strategies.stopping import samples_needed
    from metagen.testbed import format_prompt, grade

    selector = SelfConsistency()
    correct: list[float] = []
    tokens: list[int] = []
    for r, p in zip(sc_results, problems):
        classes = selector.answer_classes(r.candidates)[1]
        k = samples_needed(classes, 4, **REPLAYS[name])
        pick = selector.select([format_prompt(p)], [r.candidates[:k]])[0]
        correct.append(float(bool(grade(r.candidates[:k][pick.index].text, p.answer))))
        tokens.append(sum(c.num_tokens for c in r.candidates[:k]))
    twin = "self_consistency@16 (samples)"
    return row_of(name, twin, correct, tokens, 0.0)


def compare(row: dict[str, Any], rows: dict[str, dict[str, Any]]) -> None:
    """Adds the saving and the paired accuracy difference against the row's twin."""
    twin = rows.get(row["twin"] or "")
    if twin is None:
        return
    diff, se = paired_difference(row["correct"], twin["correct"])
    row["saving"] = twin["mean_tokens"] / row["mean_tokens"] if row["mean_tokens"] else math.inf
    row["accuracy_diff"], row["accuracy_diff_se"] = diff, se


def markdown(rows: dict[str, dict[str, Any]]) -> str:
    lines = ["| method | twin | accuracy ± SE | tokens / problem | saving vs twin | "
             "accuracy − twin ± SE (paired) |", "|---|---|---|---|---|---|"]
    for r in rows.values():
        saving = f"{r['saving']:.2f}x" if "saving" in r else "—"
        diff = (f"{r['accuracy_diff']:+.3f} ± {r['accuracy_diff_se']:.3f}"
                if "accuracy_diff" in r else "—")
        lines.append(f"| {r['name']} | {r['twin'] or '—'} | {r['accuracy']:.3f} ± "
                     f"{r['accuracy_se']:.3f} | {r['mean_tokens']:.0f} | {saving} | {diff} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--only", default=None, help="comma-separated row names")
    ap.add_argument("--json", default=str(DEFAULT_JSON))
    args = ap.parse_args(argv)
    from metagen.eval.demo import load_testbed_policy
    from metagen.scorers.resolve import load_reward_folder as load_reward
    from metagen.testbed import make_problems, model_path

    generator = load_testbed_policy("local")
    # the demo's default process reward: the testbed verifier's confidence in the solution so
    # far (the trained PRM does not rank one problem's solutions, see metagen/testbed/README.md)
    prm = load_reward(model_path("orm"))
    problems = make_problems("test", args.problems, seed=0)
    names = args.only.split(",") if args.only else list(ROWS)
    out = Path(args.json)
    rows: dict[str, dict[str, Any]] = {}
    if out.exists():
        old = json.loads(out.read_text())
        if old.get("problems") == args.problems and old.get("seed") == args.seed:
            rows = {r["name"]: r for r in old["rows"]}
    for name in names:
        rows[name], results = run_row(name, generator, prm, problems, args.seed, args.chunk)
        if name == "self_consistency@16":
            # the twin of the replays: the same samples' tokens (usage apportions the batch)
            rows[name + " (samples)"] = row_of(
                name + " (samples)", None, rows[name]["correct"],
                [sum(c.num_tokens for c in r.candidates) for r in results], 0.0)
            for replay in REPLAYS:
                rows[replay] = replay_row(replay, results, problems)
        for r in rows.values():
            compare(r, rows)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"problems": args.problems, "seed": args.seed,
                                   "temperature": TEMPERATURE, "rows": list(rows.values())},
                                  indent=1))
        print(markdown({name: rows[name]}).splitlines()[-1], f"({rows[name]['seconds']:.0f} s)",
              flush=True)
        if name == "self_consistency@16":
            print(markdown({k: rows[k] for k in REPLAYS}), flush=True)
    print(markdown(rows))


if __name__ == "__main__":
    main()
