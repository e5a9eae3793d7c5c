"""chrF (Popović 2015) as pure functions over character n-gram counts, so that references can be
aggregated.

:func:`chrf` on two strings equals ``sacrebleu.sentence_chrf(hyp, [ref]).score / 100`` (chrF2,
character order 6, whitespace removed, sacreBLEU >= 2's effective-order averaging). Because it
works on count vectors, the reference side may be a *weighted average* of several references'
counts — reference aggregation for linear-time MBR (DeNero et al. 2009; Vamvas & Sennrich 2024).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

CHAR_ORDER = 6
BETA = 2.0

NgramCounts = list[dict[str, float]]  # one dict per order 1..CHAR_ORDER


def char_ngrams(text: str, order: int = CHAR_ORDER) -> NgramCounts:
    """Character n-gram counts of ``text`` with whitespace removed, for n = 1..order."""
    line = "".join(text.split())
    return [dict(Counter(line[i:i + n] for i in range(len(line) - n + 1)))
            for n in range(1, order + 1)]


def average_counts(counts: Sequence[NgramCounts], weights: Sequence[float]) -> NgramCounts:
    """The weighted mean of several n-gram count vectors (weights are normalised to sum 1)."""
    total = float(sum(weights))
    if not counts or total <= 0:
        raise ValueError("need at least one reference with positive weight")
    out: NgramCounts = [{} for _ in counts[0]]
    for ref, weight in zip(counts, weights):
        share = weight / total
        for agg, order in zip(out, ref):
            for gram, c in order.items():
                agg[gram] = agg.get(gram, 0.0) + share * c
    return out


def chrf_from_counts(hyp: NgramCounts, ref: NgramCounts, beta: float = BETA) -> float:
    """chrF in [0, 1] from n-gram counts (the reference side may hold fractional counts)."""
    factor = beta * beta
    precision = recall = 0.0
    effective = 0
    for h, r in zip(hyp, ref):
        n_hyp = sum(h.values())
        n_ref = sum(r.values())
        if n_hyp <= 0 or n_ref <= 0:
            continue
        match = sum(min(c, r[g]) for g, c in h.items() if g in r)
        precision += match / n_hyp
        recall += match / n_ref
        effective += 1
    if effective == 0:
        return 0.0
    precision /= effective
    recall /= effective
    if precision + recall == 0:
        return 0.0
    return (1 + factor) * precision * recall / (factor * precision + recall)


def chrf(hyp: str, ref: str) -> float:
    """Sentence chrF2 of ``hyp`` against ``ref`` in [0, 1]."""
    return chrf_from_counts(char_ngrams(hyp), char_ngrams(ref))
