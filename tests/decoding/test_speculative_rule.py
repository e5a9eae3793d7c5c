"""The speculative accept/reject rule: golden values, greedy equivalence, exact distribution.

Statistical tests use a chi-square goodness-of-fit test at significance 1e-6 (critical value from
the Wilson-Hilferty approximation): under a correct rule a fresh seed fails with probability about
1e-6; the seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from metagen.decoding.speculative import (
    PAD, greedy_accept, sample_inverse_cdf, speculative_accept)
from metagen.errors import InvalidParameterError

Z_1E6 = 4.7534  # standard normal upper quantile at 1e-6


def chi2_critical(df: int, z: float = Z_1E6) -> float:
    """Wilson-Hilferty approximation of the chi-square upper quantile."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2_stat(counts: torch.Tensor, probs: torch.Tensor) -> tuple[float, int]:
    n = counts.sum().item()
    expected = probs.to(torch.float64) * n
    keep = expected > 0
    assert counts[~keep].sum() == 0, "sampled an outcome of probability zero"
    stat = ((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum().item()
    return stat, int(keep.sum().item()) - 1


def test_greedy_accept_golden() -> None:
    drafts = torch.tensor([[5, 6, 7], [5, 6, 7], [1, 2, 3], [4, 4, 4]])
    argmax = torch.tensor([[5, 6, 7, 8], [5, 9, 7, 8], [0, 2, 3, 8], [4, 4, 4, 4]])
    out = greedy_accept(drafts, argmax, num_draft=torch.tensor([3, 3, 3, 1]))
    assert out.num_accepted.tolist() == [3, 1, 0, 1]
    assert out.tokens.tolist() == [[5, 6, 7, 8], [5, 9, PAD, PAD], [0, PAD, PAD, PAD],
                                   [4, 4, PAD, PAD]]
    assert out.num_emitted.tolist() == [4, 2, 1, 2]


def test_one_hot_target_reduces_to_greedy() -> None:
    gen = torch.Generator().manual_seed(0)
    b, k, v = 64, 4, 7
    argmax = torch.randint(0, v, (b, k + 1), generator=gen)
    drafts = torch.where(torch.rand(b, k, generator=gen) < 0.7, argmax[:, :k],
                         torch.randint(0, v, (b, k), generator=gen))
    onehot = torch.nn.functional.one_hot(argmax, v).double()
    q = torch.softmax(torch.randn(b, k, v, generator=gen), -1)
    for draft_probs in (None, q):
        out = speculative_accept(drafts, draft_probs, onehot, torch.rand(b, k, generator=gen),
                                 torch.rand(b, generator=gen))
        ref = greedy_accept(drafts, argmax)
        assert torch.equal(out.tokens, ref.tokens)


def test_identical_draft_is_always_accepted() -> None:
    gen = torch.Generator().manual_seed(1)
    b, k, v = 32, 3, 5
    p = torch.softmax(torch.randn(b, k + 1, v, generator=gen), -1)
    drafts = torch.multinomial(p[:, :k].reshape(-1, v), 1, generator=gen).view(b, k)
    out = speculative_accept(drafts, p[:, :k], p, torch.rand(b, k, generator=gen),
                             torch.rand(b, generator=gen))
    assert out.num_accepted.tolist() == [k] * b


def test_sample_inverse_cdf_skips_zero_mass() -> None:
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.5]] * 5)
    u = torch.tensor([0.0, 0.25, 0.5, 0.75, 0.999999])
    assert sample_inverse_cdf(probs, u).tolist() == [1, 1, 3, 3, 3]


def test_shape_errors_name_the_parameter() -> None:
    with pytest.raises(InvalidParameterError, match="target"):
        greedy_accept(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(InvalidParameterError, match="num_draft"):
        greedy_accept(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 4, dtype=torch.long),
                      num_draft=torch.tensor([4, 0]))


@pytest.mark.parametrize("deterministic", [False, True])
def test_first_token_distributed_as_target(deterministic: bool) -> None:
    """One round with one position: the emitted token ~ p, for a draft q far from p."""
    gen = torch.Generator().manual_seed(2)
    v, n = 6, 200_000
    p = torch.tensor([0.05, 0.30, 0.0, 0.25, 0.15, 0.25], dtype=torch.float64)
    q = torch.tensor([0.40, 0.05, 0.20, 0.05, 0.30, 0.0], dtype=torch.float64)
    if deterministic:  # prompt lookup: always proposes token 0
        drafts, draft_probs = torch.zeros(n, 1, dtype=torch.long), None
    else:
        drafts = torch.multinomial(q, n, replacement=True, generator=gen).view(n, 1)
        draft_probs = q.expand(n, 1, v)
    target = p.expand(n, 2, v)
    accept_u = torch.rand(n, 1, generator=gen, dtype=torch.float64)
    sample_u = torch.rand(n, generator=gen, dtype=torch.float64)
    out = speculative_accept(drafts, draft_probs, target, accept_u, sample_u)
    counts = torch.bincount(out.tokens[:, 0], minlength=v).double()
    stat, df = chi2_stat(counts, p)
    assert stat < chi2_critical(df), (stat, df)


def _speculative_chain(p_table: torch.Tensor, q_table: torch.Tensor | None, start: int, k: int,
                       length: int, n: int, gen: torch.Generator) -> torch.Tensor:
    """Run the speculative loop on a bigram target ``p_table[prev]`` for ``n`` independent rows.

    The draft is the bigram ``q_table`` or, when None, a fixed guess (the last token repeated).
    Returns the first ``length`` emitted tokens of every row, (n, length).
    """
    seqs = torch.full((n, length + k + 1), -1, dtype=torch.long)
    have = torch.zeros(n, dtype=torch.long)
    rows = torch.arange(n)
    while bool((have < length).any()):
        last = torch.where(have > 0, seqs[rows, (have - 1).clamp(min=0)],
                           torch.full_like(have, start))
        drafts, dprobs, prev = [], [], last
        for _ in range(k):
            if q_table is None:
                tok, qd = prev, None
            else:
                qd = q_table[prev]  # (n, V)
                tok = torch.multinomial(qd, 1, generator=gen).squeeze(1)
            drafts.append(tok)
            dprobs.append(qd)
            prev = tok
        drafts_t = torch.stack(drafts, 1)  # (n, K)
        ctx = torch.cat([last.unsqueeze(1), drafts_t], 1)  # token before each target position
        target = p_table[ctx]  # (n, K+1, V)
        q = None if q_table is None else torch.stack(dprobs, 1)
        accept_u = torch.rand(n, k, generator=gen, dtype=torch.float64)
        sample_u = torch.rand(n, generator=gen, dtype=torch.float64)
        out = speculative_accept(drafts_t, q, target, accept_u, sample_u)
        for j in range(k + 1):
            put = (j < out.num_emitted) & (have + j < seqs.shape[1])
            seqs[rows[put], (have + j)[put]] = out.tokens[put, j]
        have = (have + out.num_emitted).clamp(max=seqs.shape[1])
    return seqs[:, :length]


@pytest.mark.parametrize("deterministic", [False, True])
def test_sequences_distributed_as_target_chain(deterministic: bool) -> None:
    """Several rounds, K=3: the joint law of the first 3 tokens equals the target bigram chain."""
    gen = torch.Generator().manual_seed(3)
    v, k, length, n = 4, 3, 3, 60_000
    p_table = torch.softmax(torch.randn(v, v, generator=gen, dtype=torch.float64) * 1.5, -1)
    q_table = torch.softmax(torch.randn(v, v, generator=gen, dtype=torch.float64) * 1.5, -1)
    seqs = _speculative_chain(p_table, None if deterministic else q_table, 0, k, length, n, gen)
    codes = (seqs * torch.tensor([v * v, v, 1])).sum(1)
    counts = torch.bincount(codes, minlength=v ** length).double()
    exact = torch.zeros(v ** length, dtype=torch.float64)
    for a in range(v):
        for b in range(v):
            for c in range(v):
                exact[a * v * v + b * v + c] = p_table[0, a] * p_table[a, b] * p_table[b, c]
    stat, df = chi2_stat(counts, exact)
    assert stat < chi2_critical(df), (stat, df)
