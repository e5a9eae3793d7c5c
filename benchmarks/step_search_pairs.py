"""A step search against best-of-N ranked by the same process reward, paired per problem.

    python -m benchmarks.step_search_pairs [LABEL=]RUN_DIR ...

reads step-search run folders (``metagen demo --step-search ...``'s ``<out>/step_search``, which
hold ``best_of_n_prm`` beside the searches) and prints, for each search and N, its accuracy,
best-of-N's by the same process reward at the same N, the paired difference ± standard error
over the problems, and both mean FLOPs per problem.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from benchmarks.scaling_pairs import paired
from metagen.eval.breakdown import accuracy_table
from metagen.eval.demo import PRM_BASELINE
from metagen.eval.estimators import mean_stderr
from metagen.frontier.candidates import SLOT, Candidates, load_candidates, parse_labelled


def report(cands: Candidates) -> list[str]:
    acc = accuracy_table(cands.pooled.rows)
    items = cands.pooled.items
    lines = [f"{len(items)} problems"]
    for name in cands.names:
        label, strategy, n = cands.parts[name]
        base = next((b for b in cands.names if cands.parts[b] == (label, PRM_BASELINE, n)), None)
        if strategy == PRM_BASELINE or base is None:
            continue
        mean, _ = mean_stderr([acc[(name, SLOT)][i] for i in items])
        ref, _ = mean_stderr([acc[(base, SLOT)][i] for i in items])
        gain, err = paired(cands, name, base)
        lines.append(f"  {label} {strategy} n={n}: {mean:.3f} vs {PRM_BASELINE} {ref:.3f}: "
                     f"{gain:+.3f} ± {err:.3f}  FLOPs {cands.mean_flops(name, items):.3g} vs "
                     f"{cands.mean_flops(base, items):.3g}")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("runs", nargs="+", help="step-search run folders, optionally LABEL=DIR")
    args = p.parse_args(argv)
    print("\n".join(report(load_candidates([parse_labelled(r) for r in args.runs]))))


if __name__ == "__main__":
    main()
