"""Are live adaptive self-consistency's samples as good as self-consistency's? Per-round evidence.

    python -m benchmarks.adaptive_samples [--problems 40] [--seeds 0] [--chunk 50] [--json PATH]

On ``make_problems("test", P, seed=0)`` with the testbed policy, temperature 0.8, max_tokens 128
and, per seed ``s``, chunk ``i`` of the problems seeded ``s + i`` (exactly as
:mod:`benchmarks.adaptive_table`, so seed 0 reproduces its rows), three runs on one generator:

- ``sc``: self-consistency at N = 16 (one call; its samples 4k .. 4k+3 are "round" k);
- ``live``: adaptive self-consistency (Beta rule at 0.95, rounds of 4, N = 16);
- ``forced``: the same adaptive run with a confidence no vote reaches, so every problem draws
  all 4 rounds: the live run's samples (its rounds are batch-invariant) without its selection
  of hard problems, i.e. SC@16 on adaptive's seeds.

Per round it reports the per-sample accuracy (fraction of a problem's samples graded correct,
averaged over problems and seeds; its standard error over problems, since one problem's samples
are correlated) over the problems the live run took to that round and over all problems, the
duplicate rate (samples whose text equals an earlier sample of the same problem), the mean
tokens per sample, and whether every round-k request equals SC's apart from ``n`` and ``seed``
(same prompts, every other sampling parameter equal). Per seed and pooled: vote accuracy of each
run and the paired differences live − sc, forced − sc, live − forced (pooled SE over problems of
the per-problem mean over seeds). Also: the share of live round-0 samples equal to SC's first
four (same seed and sample indices; a mismatch is the prefix-cache state changing logits' last
bits) and of live samples equal to forced's. Written to JSON; never asserted in tests.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from metagen.eval.estimators import mean_stderr
from metagen.types import Completion, Result, SamplingParams

TEMPERATURE = 0.8
MAX_TOKENS = 128
N, BATCH = 16, 4
ROUNDS = N // BATCH
NEVER = 1.0 - 1e-9  # above the Beta rule's largest value at N = 16 (1 - 2**-17)
RUNS = ("sc", "live", "forced")
PAIRS = (("live", "sc"), ("forced", "sc"), ("live", "forced"))
DEFAULT_JSON = Path(__file__).parent / "results" / "adaptive_samples_cpu_2core.json"

Call = tuple[list[Any], SamplingParams]


class Recorder:
    """A generator that forwards to ``inner`` and keeps every call's (prompts, params)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[Call] = []

    @property
    def capabilities(self) -> Any:
        return self.inner.capabilities

    @property
    def usage(self) -> Any:
        return self.inner.usage

    def generate(self, prompts: Sequence[Any], params: SamplingParams) -> list[list[Completion]]:
        self.calls.append((list(prompts), params))
        out: list[list[Completion]] = self.inner.generate(prompts, params)
        return out


def same_request(call: Call, sc: Call, open_rows: list[int]) -> bool:
    """``call``'s prompts are SC's prompts ``open_rows`` and its params are SC's but for ``n``
    and ``seed``."""
    prompts, params = call
    return prompts == [sc[0][i] for i in open_rows] and \
        params.with_(n=sc[1].n, seed=sc[1].seed) == sc[1]


def runners(gen: Recorder) -> dict[str, Callable[[list[str], SamplingParams], Any]]:
    from metagen.strategies import adaptive_self_consistency, self_consistency
    return {
        "sc": lambda ps, p: self_consistency(gen, ps, n=N, params=p),
        "live": lambda ps, p: adaptive_self_consistency(gen, ps, n=N, batch=BATCH,
                                                        confidence=0.95, params=p),
        "forced": lambda ps, p: adaptive_self_consistency(gen, ps, n=N, batch=BATCH,
                                                          confidence=NEVER, params=p)}


def run_seed(gen: Recorder, prompts: list[str], seed: int, chunk: int
             ) -> tuple[dict[str, list[Result]], list[bool], float]:
    """The three runs at ``seed`` (chunk i seeded seed + i): (results by run, per round whether
    every live request of that round equals SC's but for n and seed, seconds)."""
    out: dict[str, list[Result]] = {name: [] for name in RUNS}
    equal = [True] * ROUNDS
    start = time.perf_counter()
    for i in range(0, len(prompts), chunk):
        part = prompts[i:i + chunk]
        params = SamplingParams(temperature=TEMPERATURE, seed=seed + i, max_tokens=MAX_TOKENS)
        calls: dict[str, list[Call]] = {}
        for name, run in runners(gen).items():
            gen.calls = []
            res = run(part, params)
            out[name] += res if isinstance(res, list) else [res]
            calls[name] = gen.calls
        rounds = [r.trace["rounds"] for r in out["live"][i:]]
        for k in range(ROUNDS):
            reached = [j for j, r in enumerate(rounds) if r > k]
            if k < len(calls["live"]):
                equal[k] &= same_request(calls["live"][k], calls["sc"][0], reached)
            equal[k] &= same_request(calls["forced"][k], calls["sc"][0], list(range(len(part))))
    return out, equal, time.perf_counter() - start


def round_table(samples: dict[str, list[list[Completion]]], answers: list[int],
                rows: list[int], k: int, names: Sequence[str]) -> dict[str, Any]:
    """Round ``k``'s samples (slots ``4k .. 4k+3``) of the problems ``rows``, per run."""
    from metagen.testbed import grade
    out = {}
    for name in names:
        per_problem, dup, tokens, count = [], 0, 0, 0
        for i in rows:
            row = samples[name][i]
            part = row[BATCH * k:BATCH * (k + 1)]
            per_problem.append(sum(grade(c.text, answers[i]) for c in part) / len(part))
            dup += sum(c.text in {d.text for d in row[:BATCH * k + j]} for j, c in enumerate(part))
            tokens += sum(c.num_tokens for c in part)
            count += len(part)
        acc, se = mean_stderr(per_problem)
        out[name] = {"problems": len(rows), "samples": count, "sample_accuracy": acc,
                     "sample_accuracy_se": se, "duplicate_rate": dup / count if count else None,
                     "mean_tokens": tokens / count if count else None,
                     "per_problem": per_problem}
    return out


def vote_correct(results: list[Result], answers: list[int]) -> list[float]:
    from metagen.testbed import grade
    return [float(r.best is not None and grade(r.text, a)) for r, a in zip(results, answers)]


def seed_report(results: dict[str, list[Result]], answers: list[int], equal: list[bool],
                seconds: float) -> dict[str, Any]:
    samples = {k: [r.candidates for r in v] for k, v in results.items()}
    rounds = [r.trace["rounds"] for r in results["live"]]
    everyone = list(range(len(answers)))
    correct = {k: vote_correct(v, answers) for k, v in results.items()}
    report: dict[str, Any] = {
        "seconds": seconds, "correct": correct,
        "vote_accuracy": {k: sum(v) / len(v) for k, v in correct.items()},
        "live_rounds": [rounds.count(k) for k in range(1, ROUNDS + 1)],
        "round0_live_equals_sc": sum(a.text == b.text for i in everyone for a, b in zip(
            samples["live"][i][:BATCH], samples["sc"][i][:BATCH])) / (BATCH * len(everyone)),
        "live_equals_forced": sum(a.text == b.text for i in everyone for a, b in zip(
            samples["live"][i], samples["forced"][i])) / sum(map(len, samples["live"])),
        "rounds": []}
    for k in range(ROUNDS):
        reached = [i for i in everyone if rounds[i] > k]
        report["rounds"].append({
            "round": k, "request_equals_sc": equal[k],
            "reached": round_table(samples, answers, reached, k, RUNS),
            "all": round_table(samples, answers, everyone, k, ("sc", "forced"))})
    return report


def pooled(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Vote accuracy and paired differences over all seeds (SE over problems of the per-problem
    mean over seeds), and the per-round sample accuracy over all problems, pooled likewise."""
    m = len(seeds[0]["correct"]["sc"])
    mean_over_seeds = {name: [sum(s["correct"][name][i] for s in seeds) / len(seeds)
                              for i in range(m)] for name in RUNS}
    out: dict[str, Any] = {"vote_accuracy": {k: mean_stderr(v)
                                             for k, v in mean_over_seeds.items()}}
    for a, b in PAIRS:
        out[f"{a} - {b}"] = mean_stderr([x - y for x, y in zip(mean_over_seeds[a],
                                                               mean_over_seeds[b])])
    out["sample_accuracy_by_round"] = []
    for k in range(ROUNDS):
        acc = {name: [sum(s["rounds"][k]["all"][name]["per_problem"][i] for s in seeds)
                      / len(seeds) for i in range(m)] for name in ("sc", "forced")}
        out["sample_accuracy_by_round"].append(
            {**{name: mean_stderr(v) for name, v in acc.items()},
             "forced - sc": mean_stderr([x - y for x, y in zip(acc["forced"], acc["sc"])])})
    return out


def print_tables(report: dict[str, Any]) -> None:
    print("| seed | sc | live | forced | live − sc | forced − sc | live − forced | "
          "live rounds 1/2/3/4 | round-0 = SC | live = forced | requests = SC's |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in report["seeds"]:
        v, c = s["vote_accuracy"], s["correct"]
        diffs = [mean_stderr([x - y for x, y in zip(c[a], c[b])]) for a, b in PAIRS]
        print(f"| {s['seed']} | {v['sc']:.3f} | {v['live']:.3f} | {v['forced']:.3f} | "
              + " | ".join(f"{d:+.3f} ± {e:.3f}" for d, e in diffs)
              + f" | {'/'.join(map(str, s['live_rounds']))} | {s['round0_live_equals_sc']:.3f}"
              f" | {s['live_equals_forced']:.3f} | "
              f"{all(r['request_equals_sc'] for r in s['rounds'])} |")
    p = report["pooled"]
    print(f"| pooled ({len(report['seeds'])} seeds) | "
          + " | ".join(f"{p['vote_accuracy'][k][0]:.3f}" for k in RUNS) + " | "
          + " | ".join(f"{p[f'{a} - {b}'][0]:+.3f} ± {p[f'{a} - {b}'][1]:.3f}" for a, b in PAIRS)
          + " | | | | |")
    print("\n| round | sc sample accuracy ± SE | forced (adaptive's seeds) | "
          "forced − sc (paired) |")
    print("|---|---|---|---|")
    for k, r in enumerate(p["sample_accuracy_by_round"]):
        print(f"| {k} | " + " | ".join(f"{r[name][0]:.3f} ± {r[name][1]:.3f}"
                                      for name in ("sc", "forced")) +
              f" | {r['forced - sc'][0]:+.3f} ± {r['forced - sc'][1]:.3f} |")
    print("\n| seed | round | problems | run | sample accuracy ± SE | duplicate rate | "
          "tokens / sample |")
    print("|---|---|---|---|---|---|---|")
    for s in report["seeds"]:
        for r in s["rounds"]:
            for name, t in r["reached"].items():
                print(f"| {s['seed']} | {r['round']} | reached {t['problems']} | {name} | "
                      f"{t['sample_accuracy']:.3f} ± {t['sample_accuracy_se']:.3f} | "
                      f"{t['duplicate_rate']:.3f} | {t['mean_tokens']:.1f} |")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=40)
    ap.add_argument("--seeds", default="0", help="comma-separated seeds")
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--json", default=str(DEFAULT_JSON))
    args = ap.parse_args(argv)
    from metagen.eval.demo import load_testbed_policy
    from metagen.testbed import format_prompt, make_problems

    gen = Recorder(load_testbed_policy("local"))
    problems = make_problems("test", args.problems, seed=0)
    prompts = [format_prompt(p) for p in problems]
    answers = [p.answer for p in problems]
    report: dict[str, Any] = {"problems": args.problems, "chunk": args.chunk,
                              "temperature": TEMPERATURE, "seeds": []}
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    for seed in [int(s) for s in args.seeds.split(",")]:
        results, equal, seconds = run_seed(gen, prompts, seed, args.chunk)
        report["seeds"].append({"seed": seed, **seed_report(results, answers, equal, seconds)})
        report["pooled"] = pooled(report["seeds"])
        out.write_text(json.dumps(report, indent=1))  # after every seed: a stopped run keeps it
        print(f"seed {seed}: {seconds:.0f} s, vote accuracy "
              f"{report['seeds'][-1]['vote_accuracy']}", flush=True)
    print_tables(report)


if __name__ == "__main__":
    main()
