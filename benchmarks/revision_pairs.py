"""Sequential revision against parallel sampling at the same N, by difficulty, paired per problem.

    python -m benchmarks.revision_pairs RUN [LABEL=RUN ...] [--model revise] [--ns 1,2,4,8]

reads ``metagen eval testbed`` run folders (the reviser's run with ``revision_chain``,
``revision_vote``, ``best_of_n``, ``self_consistency`` and ``greedy``; optionally other models'
runs on the same items) and prints every (model, strategy, N)'s accuracy ± standard error, by
difficulty, with its mean FLOPs per problem; then, for each N, the paired differences of the
chain against parallel sampling with the same selection (best of the chain by the ORM against
best-of-N by the ORM; a vote over the chain against self-consistency), overall and by difficulty.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from metagen.eval.breakdown import accuracy_table
from metagen.eval.estimators import mean_stderr
from metagen.frontier.candidates import SLOT, Candidates, load_candidates, parse_labelled

PAIRS = (("revision_chain", "best_of_n"), ("revision_vote", "self_consistency"))


def _bins(cands: Candidates) -> dict[str, list[str]]:
    """Difficulty label -> items (sorted), and ``all``."""
    by: dict[str, list[str]] = {}
    for item, label in sorted(cands.pooled.labels.items()):
        by.setdefault(str(label), []).append(item)
    return {"all": list(cands.pooled.items), **dict(sorted(by.items()))}


def _cell(values: Sequence[float]) -> str:
    mean, err = mean_stderr(list(values))
    return f"{100 * mean:5.1f} ± {100 * err:3.1f}"


def report(cands: Candidates, model: str, ns: Sequence[int]) -> list[str]:
    acc = accuracy_table(cands.pooled.rows)
    bins = _bins(cands)
    head = " | ".join(f"{b} ({len(items)})" for b, items in bins.items())
    lines = [f"| candidate | FLOPs/item | {head} |", "| --- " * (len(bins) + 2) + "|"]
    for name in cands.names:
        cells = " | ".join(_cell([acc[(name, SLOT)][i] for i in items]) for items in bins.values())
        lines.append(f"| {name} | {cands.mean_flops(name, bins['all']):.3g} | {cells} |")
    lines += ["", f"paired, {model}: chain minus parallel at the same N (points ± standard error)",
              f"| pair | {head} |", "| --- " * (len(bins) + 1) + "|"]
    for n in ns:
        for chain, parallel in PAIRS:
            a, b = f"{model}/{chain}@{n}", f"{model}/{parallel}@{n}"
            if a not in cands.parts or b not in cands.parts:
                continue
            cells = " | ".join(_cell([acc[(a, SLOT)][i] - acc[(b, SLOT)][i] for i in items])
                               for items in bins.values())
            lines.append(f"| {chain} - {parallel} @{n} | {cells} |")
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("runs", nargs="+", help="run folders, DIR or LABEL=DIR")
    p.add_argument("--model", default="revise", help="the label of the reviser's run")
    p.add_argument("--ns", default="1,2,4,8")
    args = p.parse_args(argv)
    cands = load_candidates([parse_labelled(r) for r in args.runs])
    print("\n".join(report(cands, args.model, [int(n) for n in args.ns.split(",")])))


if __name__ == "__main__":
    main()
