"""MBR on MockGenerator (scripted): golden selections per utility, the voting equivalence,
linear-time variants, model weighting, execution agreement (in the default sandbox)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from metagen.errors import CapabilityError, InvalidParameterError
from metagen.generators.mock import MockGenerator
from metagen.scorers import AnswerMatchUtility, EmbeddingCosineUtility, ExecutionAgreementUtility
from metagen.scorers.chrf import chrf
from metagen.strategies import MBR, expected_utility, mbr, mbr_prune, self_consistency
from tests.scorers._answers import last_int, same
from tests.strategies._helpers import PARAMS, comp

ANSWER = AnswerMatchUtility(extract=last_int, match=same)


def test_expected_utility_golden():
    assert expected_utility([[1, 0], [0.5, 0.5]], [3, 1]) == [0.75, 0.5]
    with pytest.raises(InvalidParameterError):
        expected_utility([[1]], [0])


def test_scripted_chrf_mbr_picks_the_consensus_string():
    outs = ["the cat sat on the mat", "a cat sat on a mat", "the cat sat on a mat",
            "dogs bark loudly"]
    res = mbr(MockGenerator(outs), "Q", n=4, utility="chrf", params=PARAMS)
    want = [sum(chrf(h, r) for r in outs) / 4 for h in outs]
    assert res.scores == pytest.approx(want)
    assert res.text == outs[int(np.argmax(want))] == "the cat sat on a mat"


@pytest.mark.parametrize("utility", ["bleu", "rouge"])
def test_scripted_library_utilities_pick_consensus(utility):
    outs = ["the cat sat on the mat", "dogs bark loudly", "the cat sat on a mat",
            "the cat sat on the mat today"]
    res = mbr(MockGenerator(outs), "Q", n=4, utility=utility, params=PARAMS)
    assert res.text.startswith("the cat sat on")
    assert res.trace["utility_evaluations"] == 16


def test_scripted_answer_mbr_selects_exactly_what_self_consistency_selects():
    rng = random.Random(0)
    for trial in range(60):
        n = rng.randint(1, 12)
        outs = [rng.choice(["#### 1", "#### 2", "so 2", "#### 3", "none", "x 01"])
                for j in range(n)]
        outs = [o + (" " * j) for j, o in enumerate(outs)]  # distinct texts, same answers
        sc = self_consistency(MockGenerator(outs), "Q", n=n, extract=last_int, match=same,
                              params=PARAMS)
        m = mbr(MockGenerator(outs), "Q", n=n, utility=ANSWER, params=PARAMS)
        assert m.text == sc.text, outs


def test_scripted_reference_aggregation_equals_exact_for_embedding_cosine():
    def embed(texts):
        return np.array([[t.count(c) + 0.1 for c in "abcdefghij"] for t in texts])
    outs = ["abc", "abd", "ggh", "abcab", "jjj"]
    util = EmbeddingCosineUtility(embed=embed)
    exact = mbr(MockGenerator(outs), "Q", n=5, utility=util, params=PARAMS)
    agg = mbr(MockGenerator(outs), "Q", n=5, utility=util, method="aggregate", params=PARAMS)
    assert agg.scores == pytest.approx(exact.scores) and agg.text == exact.text
    assert agg.trace["utility_evaluations"] == 5


def test_scripted_chrf_aggregation_picks_consensus():
    outs = ["the cat sat on the mat", "a cat sat on a mat", "the cat sat on a mat",
            "dogs bark loudly"]
    res = mbr(MockGenerator(outs), "Q", n=4, utility="chrf", method="aggregate", params=PARAMS)
    assert res.text == "the cat sat on a mat"


def test_aggregate_needs_a_utility_that_supports_it():
    with pytest.raises(InvalidParameterError, match="aggregation"):
        MBR(ANSWER, method="aggregate")


def test_pruning_keeps_the_winner_and_saves_evaluations():
    rng = np.random.default_rng(0)
    n = 32
    quality = np.linspace(0, 1, n)
    full = np.clip(quality[:, None] + 0.05 * rng.standard_normal((n, n)), 0, 1)  # (H, R)
    best_exact = int(np.argmax(full.mean(1)))
    best, scores, info = mbr_prune(lambda hs, rs: full[np.ix_(hs, rs)].tolist(), n,
                                   schedule=(4, 8, 16, 32), alpha=0.9)
    assert best == best_exact
    assert info["utility_evaluations"] < n * n // 2
    assert info["stages"][0]["alive"] == list(range(n))


def test_pruning_with_nothing_to_prune_equals_exact():
    outs = ["#### 1", "#### 2", "#### 2", "#### 1", "#### 2"]
    exact = mbr(MockGenerator(outs), "Q", n=5, utility=ANSWER, params=PARAMS)
    pruned = mbr(MockGenerator(outs), "Q", n=5, utility=ANSWER, method="prune", schedule=(2,),
                 alpha=0.999999, params=PARAMS)
    assert pruned.text == exact.text == "#### 2"


def test_scripted_model_weighting_uses_softmax_of_logprobs():
    outs = [comp("#### 1", math.log(0.7)), comp("#### 2", math.log(0.2)),
            comp("#### 2", math.log(0.1))]
    uniform = mbr(MockGenerator(outs), "Q", n=3, utility=ANSWER, params=PARAMS)
    weighted = mbr(MockGenerator(outs), "Q", n=3, utility=ANSWER, weighting="logprob",
                   params=PARAMS)
    assert uniform.text == "#### 2"
    assert weighted.text == "#### 1"
    assert weighted.scores == pytest.approx([0.7, 0.3, 0.3])
    with pytest.raises(CapabilityError):
        mbr(MockGenerator(["#### 1"]), "Q", n=1, utility=ANSWER, weighting="logprob",
            params=PARAMS)


def test_scripted_callable_utility():
    res = mbr(MockGenerator(["aa", "ab", "bb"]), "Q", n=3,
              utility=lambda h, r: float(h[0] == r[0]) + float(h[1] == r[1]), params=PARAMS)
    assert res.text == "ab" and res.scores == pytest.approx([1.0, 4 / 3, 1.0])


def test_scripted_execution_agreement_mbr(default_sandbox):
    add = "def f(a, b):\n    return a + b\n"
    progs = [add, "def f(a, b):\n    return a * b\n", "def f(x, y):\n    return y + x\n",
             "def f(a, b):\n    return a - b\n"]
    util = ExecutionAgreementUtility([[1, 2], [2, 2], [0, 5]], "f", allow_code_execution=True)
    res = mbr(MockGenerator(progs), "Q", n=4, utility=util, params=PARAMS)
    assert res.text == add  # agrees with program 3 on every input
