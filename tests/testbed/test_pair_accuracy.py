"""Golden values of the within-problem pair accuracy of reward-model evaluation."""

from metagen.testbed.eval_all import pair_accuracy


def test_pair_accuracy_counts_only_mixed_pairs():
    # pairs: (right 0.9, wrong 0.1) win; (both right) skipped; (wrong 0.7, right 0.2) loss;
    # (right 0.5, wrong 0.5) tie = half
    scores = [0.9, 0.1, 0.3, 0.4, 0.7, 0.2, 0.5, 0.5]
    labels = [True, False, True, True, False, True, True, False]
    assert pair_accuracy(scores, labels) == (1 + 0 + 0.5) / 3


def test_pair_accuracy_none_without_mixed_pairs():
    assert pair_accuracy([0.1, 0.2], [True, True]) is None
    assert pair_accuracy([], []) is None
