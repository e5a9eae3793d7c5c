"""A beam search step's candidates in C (``SampleRows.beam_top``, ``sample_rows.c``) against a
float64 log-softmax and top-k, on both vector paths and every thread count, and the engine's beam
search through it against its PyTorch path."""

from __future__ import annotations

import math

import pytest
import torch

from metagen.beam_params import BeamSearchParams
from metagen.engine.native import sample_rows as sr
from tests.tolerances import FLOAT_LOGPROB_TOL

from ._native_variants import load_variant, variants


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def kernel(request, tmp_path_factory) -> sr.SampleRows:
    return load_variant(sr.load_from, request.param, tmp_path_factory)


def _rows(seed: int, rows: int, vocab: int) -> tuple[torch.Tensor, list[float]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g) * (1 + seed % 4)
    x[:, seed % 5::5] = float("-inf")  # masked tokens: candidates only when nothing else is
    scores = (torch.rand(rows, generator=g) * -8).tolist()
    return x, scores


def _reference(x: torch.Tensor, scores: list[float]) -> list[float]:
    """Every candidate's value, flat: a float64 log-softmax plus the beam's score."""
    score = torch.tensor(scores, dtype=torch.float64)[:, None]
    acc = torch.log_softmax(x.double(), dim=-1) + score
    return acc.reshape(-1).tolist()


@pytest.mark.parametrize("rows,vocab,keep", [(1, 5, 8), (4, 37, 8), (4, 32000, 8), (3, 1000, 12),
                                             (16, 32000, 32), (2, 100, 300)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_top_is_the_top_k_of_float64_log_softmax_plus_scores(kernel, rows, vocab, keep, seed):
    """min(keep, rows * vocab) candidates, each valued as a float64 log-softmax plus its beam's
    score to float32 rounding (2e-6 relative), best first with ties to the lower flat index, and
    the float64 top-k's set but for candidates within that rounding of the k-th value."""
    x, scores = _rows(seed, rows, vocab)
    ref = _reference(x, scores)
    got = kernel.beam_top(x, scores, keep)
    assert got is not None
    acc, flat = got
    n = min(keep, rows * vocab)
    assert len(acc) == len(flat) == n == len(set(flat))

    def close(a: float, r: float) -> bool:
        return a == r or abs(a - r) <= 2e-6 * max(1.0, abs(r))

    assert all(close(a, ref[f]) for a, f in zip(acc, flat))
    assert all(a > b or (a == b and f < g)
               for a, b, f, g in zip(acc, acc[1:], flat, flat[1:]))
    kth = sorted(ref, reverse=True)[n - 1]
    tol = 4e-6 * max(1.0, abs(kth)) if math.isfinite(kth) else 0.0
    assert {f for f, r in enumerate(ref) if r > kth + tol} <= set(flat)
    assert all(ref[f] >= kth - tol for f in flat)


def test_ties_go_to_the_lower_flat_index(kernel):
    """Equal candidates rank by flat index b * V + t (golden: two rows of equal logits and equal
    scores give 0, 1, 2, ...; a better-scored second row comes first, in its own order)."""
    x = torch.zeros(2, 40)
    acc, flat = kernel.beam_top(x, [0.0, 0.0], 5)
    assert flat == [0, 1, 2, 3, 4]
    assert acc == pytest.approx([-math.log(40)] * 5, abs=1e-6)
    _, flat = kernel.beam_top(x, [-1.0, 0.0], 3)
    assert flat == [40, 41, 42]


@pytest.mark.parametrize("bad", ["nan", "+inf", "all -inf"])
def test_a_bad_row_gives_none(kernel, bad):
    """A row holding a NaN or a +inf, or no finite value, makes the step fail (None); a row
    with some -inf logits does not."""
    x, scores = _rows(3, 4, 1000)
    assert kernel.beam_top(x, scores, 8) is not None
    if bad == "nan":
        x[2, 999] = float("nan")
    elif bad == "+inf":
        x[1, 17] = float("inf")
    else:
        x[3] = float("-inf")
    assert kernel.beam_top(x, scores, 8) is None


def test_bad_arguments_are_refused(kernel):
    x, scores = _rows(0, 2, 10)
    with pytest.raises(ValueError, match="scores"):
        kernel.beam_top(x, scores[:1], 4)
    with pytest.raises(ValueError, match="keep"):
        kernel.beam_top(x, scores, 0)
    with pytest.raises(ValueError, match="float32"):
        kernel.beam_top(x.double(), scores, 4)


@pytest.mark.parametrize("threads", [2, 3, 5])
def test_any_thread_count_gives_the_same_candidates(kernel, threads):
    x, scores = _rows(4, 7, 32000)
    assert kernel.on(threads).beam_top(x, scores, 16) == kernel.on(1).beam_top(x, scores, 16)


@pytest.mark.parametrize("case", [
    dict(num_beams=4, max_tokens=24),
    dict(num_beams=3, max_tokens=20, length_penalty=0.5, early_stopping=True),
    dict(num_beams=6, max_tokens=16, early_stopping="never", num_return_sequences=3),
], ids=["plain", "early", "never"])
def test_engine_beam_search_with_the_kernel_equals_the_pytorch_path(stories_engine_factory, case):
    """Beam search on stories260K (with its end token) through the kernel returns the PyTorch
    path's hypotheses, scores equal to float32 rounding."""
    native = stories_engine_factory()
    if native.row_kernels() is None:
        pytest.skip("no native library on this machine")
    plain = stories_engine_factory()
    plain._sample_rows = None
    prompts = [[1, 403, 407, 271], [1, 65, 300]]
    a = native.generate(prompts, BeamSearchParams(**case))
    b = plain.generate(prompts, BeamSearchParams(**case))
    for ra, rb in zip(a, b):
        assert [c.token_ids for c in ra.outputs] == [c.token_ids for c in rb.outputs]
        for ca, cb in zip(ra.outputs, rb.outputs):
            assert ca.cumulative_logprob == pytest.approx(cb.cumulative_logprob,
                                                          abs=FLOAT_LOGPROB_TOL)
