"""The tree-draft estimate's round simulation against hand-computed rounds."""

from __future__ import annotations

import pytest

from benchmarks.spec_tree_estimate import tokens_per_round


@pytest.mark.parametrize("ranks, k, widths, want", [
    # rounds: [0 0] accepted + bonus (3), then [0] accepted, rank 5 rejected (2): 5 / 2
    ([[0, 0, 1, 0, 5]], 2, [], 2.5),
    ([[0, 0, 1, 0, 5]], 2, [2], 2.5),
    # rank 1 first: a chain rejects at once (1), then two accepted + bonus (3); a top-2 tree
    # accepts it and both after it in one round
    ([[1, 0, 0]], 2, [], 2.0),
    ([[1, 0, 0]], 2, [2], 3.0),
    ([[1, 1, 0]], 3, [2], 2.0),  # the width applies at depth 1 only: 1 + bonus, then 0 + bonus
    ([[1, 1, 0]], 3, [2, 2], 4.0),  # all three accepted + bonus in one round
])
def test_tokens_per_round_golden(ranks, k, widths, want) -> None:
    assert tokens_per_round(ranks, k, widths) == pytest.approx(want)
