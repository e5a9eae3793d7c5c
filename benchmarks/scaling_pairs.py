"""Smaller policy + search against a larger policy at equal or lower FLOPs, paired per problem.

    python -m benchmarks.scaling_pairs metagen_demo/scaling_laws [--models draft,policy-s,policy]

reads the ``metagen demo --scaling-laws`` run folders (``<root>/<model>/{parallel,step_search}``)
and prints every (model, strategy, N) with its accuracy ± standard error and mean FLOPs per
problem over all the runs' problems, then, for each pair (smaller, larger) of ``--models`` (given
small to large) and each of the larger model's greedy and best-of-N: the smaller model's best
candidate at no more FLOPs, its paired gain ± standard error, and the cheapest smaller candidate
with a positive paired gain.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Sequence

from metagen.eval.breakdown import accuracy_table
from metagen.eval.estimators import mean_stderr
from metagen.frontier.candidates import SLOT, Candidates, load_candidates


def paired(cands: Candidates, a: str, b: str) -> tuple[float, float]:
    """Mean and standard error of candidate ``a``'s minus ``b``'s accuracy over the items."""
    acc = accuracy_table(cands.pooled.rows)
    return mean_stderr([acc[(a, SLOT)][i] - acc[(b, SLOT)][i] for i in cands.pooled.items])


def report(cands: Candidates, models: Sequence[str]) -> list[str]:
    items = cands.pooled.items
    acc = accuracy_table(cands.pooled.rows)
    flops = {n: cands.mean_flops(n, items) for n in cands.names}
    lines = [f"{len(items)} problems"]
    for name in cands.names:
        mean, err = mean_stderr([acc[(name, SLOT)][i] for i in items])
        lines.append(f"  {name:34s} {mean:.3f} ± {err:.3f}  {flops[name]:.3g} FLOPs")
    for small, large in itertools.combinations(models, 2):
        refs = [n for n in cands.names if cands.parts[n][0] == large
                and cands.parts[n][1] in ("greedy", "best_of_n")]
        for ref in refs:
            mine = [n for n in cands.names if cands.parts[n][0] == small
                    and flops[n] <= flops[ref]]
            if not mine:
                continue
            best = max(mine, key=lambda n: (sum(acc[(n, SLOT)].values()), -flops[n]))
            gain, err = paired(cands, best, ref)
            beating = sorted((flops[n], n) for n in mine if paired(cands, n, ref)[0] > 0)
            cheapest = "none"
            if beating:
                g, e = paired(cands, beating[0][1], ref)
                cheapest = f"{beating[0][1]} ({beating[0][0]:.3g} FLOPs, {g:+.3f} ± {e:.3f})"
            lines.append(f"{small} vs {ref} ({flops[ref]:.3g} FLOPs): best at no more FLOPs "
                         f"{best} ({flops[best]:.3g}) {gain:+.3f} ± {err:.3f}; cheapest that "
                         f"beats it: {cheapest}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("root", help="the preset's scaling_laws folder")
    p.add_argument("--models", default="draft,policy-s,policy", help="small to large")
    args = p.parse_args(argv)
    models = args.models.split(",")
    entries = [(m, f"{args.root}/{m}/{run}") for m in models for run in ("parallel",
                                                                        "step_search")]
    print("\n".join(report(load_candidates(entries), models)))


if __name__ == "__main__":
    main()
