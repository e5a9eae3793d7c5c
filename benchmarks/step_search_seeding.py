"""Step search on the testbed under two seedings: one seed shared by every problem (how the
demo's stand-alone pipeline ran it, before it became a preset of the runner) or a seed per
problem (as the runner does).

    python -m benchmarks.step_search_seeding [--problems 500] [--n 4] [--seed 0]
                                             [--seeding shared|per_problem] [--json PATH]

``shared``: ONE batched ``run_step_search`` over all prompts with ``SamplingParams(temperature=
0.8, seed=SEED)``. A seeded backend gives sample ``i`` of a call the same random numbers for
every prompt of the call, so every problem's search uses the same draws: the problems are not
independent and the run's accuracy varies from seed to seed more than its binomial standard
error says. ``per_problem``: one search per prompt, seeded by a hash of (SEED, problem index),
independent draws (the runner's own seeds are ``metagen.eval.seeds.direct_seed``). Both use the
demo's process reward, the testbed verifier's step confidence (the ORM model,
:class:`~metagen.scorers.LikelihoodVerifier`), at ``width = max(1, n // 4)``, ``branching =
min(4, n)``. Prints the accuracy and generated tokens; ``--json`` also writes each problem's
text and grade. Never asserted in tests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeding", choices=("shared", "per_problem"), default="shared")
    ap.add_argument("--search", default="step_beam_search")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from metagen import testbed
    from metagen.eval.demo import load_testbed_policy
    from metagen.scorers import LikelihoodVerifier
    from metagen.strategies.step_scaling import run_step_search
    from metagen.types import SEED_MAX, SamplingParams

    problems = testbed.make_problems("test", args.problems, 0)
    prompts = [testbed.format_prompt(p) for p in problems]
    generator = load_testbed_policy("local")
    prm = LikelihoodVerifier.from_pretrained(testbed.model_path("orm"), batch_size=64)
    start = time.perf_counter()
    if args.seeding == "shared":
        results = run_step_search(args.search, generator, prompts, prm, args.n,
                                  params=SamplingParams(temperature=0.8, seed=args.seed))
    else:
        results = []
        for i, prompt in enumerate(prompts):
            digest = hashlib.sha256(f"{args.seed}-{i}".encode()).digest()
            seed = int.from_bytes(digest[:8], "big") % SEED_MAX
            results += run_step_search(args.search, generator, [prompt], prm, args.n,
                                       params=SamplingParams(temperature=0.8, seed=seed))
    correct = [r.best is not None and bool(testbed.grade(r.text, p.answer))
               for r, p in zip(results, problems)]
    rows = [{"problem": i, "correct": ok, "text": r.text,
             "generated_tokens": r.usage.generated_tokens, "difficulty": p.difficulty}
            for i, (r, p, ok) in enumerate(zip(results, problems, correct))]
    accuracy = sum(correct) / len(rows)
    tokens = sum(r.usage.generated_tokens for r in results)
    print(f"{args.search} n={args.n} seeding={args.seeding} seed={args.seed} on {len(rows)} "
          f"problems: accuracy {100 * accuracy:.1f} %, {tokens:,} generated tokens, "
          f"{time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "accuracy": accuracy, "generated_tokens": tokens,
                       "rows": rows}, f)


if __name__ == "__main__":
    main()
