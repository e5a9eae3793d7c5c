"""The seeded sampler: counter-based uniforms, batch-position independence, distribution tests
with stated bounds, and logprobs."""

from __future__ import annotations

import math
import random

import mpmath
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from metagen.decoding import (
    SequenceState, decode_step, inverse_cdf_sample, log_softmax_rows, probs_for_sampling,
    uniform_for, uniforms_for,
)
from metagen.types import SamplingParams

DELTA = 1e-6  # every statistical test below fails with probability < DELTA under H0
NEG_INF = float("-inf")


def chi2_sf(stat: float, dof: int) -> float:
    """P(X >= stat) for X ~ chi-square(dof): the regularised upper incomplete gamma."""
    return float(mpmath.gammainc(dof / 2, stat / 2, mpmath.inf, regularized=True))


def hoeffding_radius(n: int, categories: int, delta: float = DELTA) -> float:
    """With probability >= 1 - delta, every empirical frequency of n i.i.d. draws is within this
    distance of its probability (Hoeffding per category, union bound over categories)."""
    return math.sqrt(math.log(2 * categories / delta) / (2 * n))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**63 - 1), st.integers(0, 2**20), st.integers(0, 2**20),
       st.integers(0, 7))
def test_vectorised_uniforms_equal_scalar_ones(seed, index, step, stream):
    u = uniform_for(seed, index, step, stream)
    assert 0.0 <= u < 1.0
    v = uniforms_for([seed, 1], [index, 2], [step, 3], stream)  # small batch: Python ints
    assert v[0] == u and v[1] == uniform_for(1, 2, 3, stream)
    w = uniforms_for([seed] * 40, [index + i for i in range(40)], step, stream)  # NumPy path
    assert w[0] == u and w[39] == uniform_for(seed, index + 39, step, stream)


def test_uniforms_are_uniform_chi_square():
    # 200k uniforms over consecutive counters of a few seeds, 100 equal bins.
    n_per, seeds = 50_000, [0, 1, 2**62 + 7, 123456789]
    us = np.concatenate([
        uniforms_for([s] * n_per, list(range(n_per)), [i % 97 for i in range(n_per)])
        for s in seeds])
    counts = np.bincount((us * 100).astype(int), minlength=100)
    expected = len(us) / 100
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf(stat, 99) > DELTA, stat
    # neighbouring counters are not correlated: lag-1 correlation within 5 sigma (p < 1e-6)
    corr = float(np.corrcoef(us[:-1], us[1:])[0, 1])
    assert abs(corr) < 5.0 / math.sqrt(len(us))


def test_streams_steps_and_indices_give_different_draws():
    draws = {uniform_for(7, i, t, s) for i in range(4) for t in range(4) for s in range(4)}
    assert len(draws) == 64


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.0, 1e-30, 0.1, 0.5, 3.0]), min_size=1, max_size=12),
       st.sampled_from([0.0, 1e-12, 0.3, 0.999999, 1.0 - 2.0**-53]))
def test_inverse_cdf_never_returns_a_zero_probability_token(weights, u):
    if not any(w > 0 for w in weights):
        weights = weights + [1.0]
    probs = torch.tensor([weights], dtype=torch.float64)
    tok = inverse_cdf_sample(probs, torch.tensor([u], dtype=torch.float64)).item()
    assert probs[0, tok] > 0
    cdf = np.cumsum(weights)
    assert tok == min(int(np.searchsorted(cdf, u * cdf[-1], side="right")),
                      max(j for j, w in enumerate(weights) if w > 0))


def test_two_level_inverse_cdf_equals_one_float64_scan_over_the_vocabulary():
    """Many blocks (V = 1000 is not a multiple of the block), zero entries and whole zero
    blocks: the block-then-token search picks the token one float64 cumulative sum over the
    row picks (ties at a rounding boundary have probability ~1e-12 here)."""
    from metagen.decoding.sampler import SCAN_BLOCK

    g = torch.Generator().manual_seed(0)
    v = 4 * SCAN_BLOCK - 24
    probs = torch.rand(64, v, generator=g) ** 4
    probs[probs < 0.05] = 0.0
    probs[:8, SCAN_BLOCK:2 * SCAN_BLOCK] = 0.0
    for _ in range(30):
        u = torch.rand(64, generator=g, dtype=torch.float64)
        got = inverse_cdf_sample(probs, u)
        cdf = np.cumsum(probs.double().numpy(), axis=-1)
        want = [int(np.searchsorted(cdf[r], u[r].item() * cdf[r, -1], side="right"))
                for r in range(64)]
        assert got.tolist() == want
        assert bool((probs.gather(1, got[:, None]) > 0).all())


# A deterministic toy "model": next-token logits are a hash of the whole context, so a sample's
# tokens depend on the other rows only if the sampler lets them.
V = 40


def toy_logits(context: list[int]) -> torch.Tensor:
    g = torch.Generator().manual_seed(hash(tuple(context)) % (2**31))
    return torch.randn(V, generator=g) * 2


def run(seqs: list[SequenceState], steps: int) -> list[list[int]]:
    for _ in range(steps):
        logits = torch.stack([toy_logits(s.prompt_ids + s.output_ids) for s in seqs])
        out = decode_step(logits, seqs)
        assert not out.errors
        for s, tok in zip(seqs, out.tokens.tolist()):
            s.append(tok)
    return [s.output_ids for s in seqs]


def make(prompt: list[int], params: SamplingParams, index: int) -> SequenceState:
    return SequenceState(params, list(prompt), sample_index=index)


def test_same_seed_and_index_give_same_samples_in_any_batch():
    params = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=12)
    other = SamplingParams(temperature=0.7, top_k=10, seed=99, max_tokens=12)
    miro = SamplingParams(mirostat_tau=2.0, seed=5, max_tokens=12)
    prompt = [3, 1, 4, 1, 5]
    alone = [run([make(prompt, params, i)], 12)[0] for i in range(3)]
    assert len({tuple(a) for a in alone}) == 3  # different sample indices, different samples
    rng = random.Random(0)
    for trial in range(4):
        fillers = [make([rng.randrange(V) for _ in range(3)], rng.choice([other, miro, params]),
                        rng.randrange(5)) for _ in range(rng.randrange(1, 6))]
        mine = [make(prompt, params, i) for i in (2, 0, 1)]
        batch = fillers + mine
        rng.shuffle(batch)
        run(batch, 12)
        assert [m.output_ids for m in mine] == [alone[2], alone[0], alone[1]]


def test_unseeded_requests_draw_fresh_seeds_and_keep_them():
    a = SequenceState(SamplingParams(), [1])
    b = SequenceState(SamplingParams(), [1])
    assert a.rng_seed != b.rng_seed  # 2**-63 chance of a false failure
    assert SequenceState(SamplingParams(seed=17), [1]).rng_seed == 17
    fork = a.fork(3)
    assert fork.rng_seed == a.rng_seed and fork.sample_index == 3


def empirical(params: SamplingParams, logits_row: torch.Tensor, n: int):
    seqs = [SequenceState(params, [1], sample_index=i) for i in range(n)]
    out = decode_step(logits_row.expand(n, -1), seqs)
    counts = torch.bincount(out.tokens, minlength=logits_row.shape[-1]).double()
    target = probs_for_sampling(logits_row[None], seqs[:1])[0].double()
    return counts, target


def chi_square_ok(counts: torch.Tensor, target: torch.Tensor) -> tuple[float, int]:
    n = counts.sum()
    support = target > 0
    assert counts[~support].sum() == 0, "sampled a removed token"
    expected, observed = target[support] * n, counts[support]
    order = torch.argsort(expected)  # pool categories with expected count < 5
    exp_b, obs_b, acc_e, acc_o = [], [], 0.0, 0.0
    for j in order.tolist():
        acc_e += float(expected[j])
        acc_o += float(observed[j])
        if acc_e >= 5:
            exp_b.append(acc_e)
            obs_b.append(acc_o)
            acc_e = acc_o = 0.0
    if acc_e > 0:
        exp_b[-1] += acc_e
        obs_b[-1] += acc_o
    e, o = np.array(exp_b), np.array(obs_b)
    return float(((o - e) ** 2 / e).sum()), len(e) - 1


def test_sampling_frequencies_match_processed_distribution():
    # H0: tokens are i.i.d. from softmax(processed logits). Pearson's statistic is compared to the
    # chi-square tail at DELTA, and every frequency to the Hoeffding radius at DELTA: each check
    # fails with probability < 1e-6 under H0 (the chi-square one asymptotically, pooled to >= 5).
    n = 12_000
    logits = torch.randn(V, generator=torch.Generator().manual_seed(3)) * 1.5
    for params in [SamplingParams(temperature=1.0, seed=11),
                   SamplingParams(temperature=0.6, top_p=0.9, seed=12),
                   SamplingParams(temperature=1.3, top_k=7, min_p=0.02, seed=13),
                   SamplingParams(temperature=1.0, typical_p=0.8, seed=14)]:
        counts, target = empirical(params, logits, n)
        stat, dof = chi_square_ok(counts, target)
        assert chi2_sf(stat, dof) > DELTA, (params, stat, dof)
        radius = hoeffding_radius(n, int((target > 0).sum()))
        assert float((counts / n - target).abs().max()) < radius


def test_top_logprobs_equal_topk_of_raw_log_softmax():
    logits = torch.randn(4, V, generator=torch.Generator().manual_seed(8)) * 3
    seqs = [SequenceState(SamplingParams(logprobs=k, temperature=t, top_k=3, seed=1), [1])
            for k, t in [(5, 0.5), (0, 1.0), (20, 2.0)]]
    seqs.append(SequenceState(SamplingParams(temperature=0.0), [1], rng_seed=0))
    out = decode_step(logits, seqs)
    raw = torch.log_softmax(logits, dim=-1)
    torch.testing.assert_close(log_softmax_rows(logits), raw)
    for b, k in enumerate([5, 0, 20]):
        vals, idx = torch.topk(raw[b], k)
        assert out.top_logprobs[b] == dict(zip(idx.tolist(), vals.tolist()))
    assert out.top_logprobs[3] is None
    chosen = raw.gather(1, out.tokens[:, None]).squeeze(1)
    assert torch.equal(out.logprobs, chosen)  # raw logprobs, not the processed ones


def test_top_logprobs_leave_out_impossible_tokens():
    logits = torch.full((1, 6), NEG_INF)
    logits[0, [1, 4]] = torch.tensor([0.0, 1.0])
    out = decode_step(logits, [SequenceState(SamplingParams(logprobs=5, seed=0), [1])])
    assert set(out.top_logprobs[0]) == {1, 4}
    assert all(math.isfinite(v) for v in out.top_logprobs[0].values())


def test_two_step_joint_distribution_matches_chi_square():
    # H0: (token at step 0, token at step 1) ~ p0(a) * p1(b | a) for a toy 4-token model, i.e. the
    # draws at consecutive steps of one sample are independent. Pearson chi-square over the 16
    # cells, fails with probability < DELTA under H0.
    v, n = 4, 8000
    base = torch.tensor([[0.1, 0.2, 0.3, 0.4]]).log()
    cond = torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25],
                         [0.1, 0.2, 0.3, 0.4], [0.05, 0.05, 0.1, 0.8]]).log()
    params = SamplingParams(seed=77, max_tokens=2)
    seqs = [SequenceState(params, [0], sample_index=i) for i in range(n)]
    first = decode_step(base.expand(n, -1), seqs).tokens
    for s, t in zip(seqs, first.tolist()):
        s.append(t)
    second = decode_step(cond[first], seqs).tokens
    counts = torch.bincount(first * v + second, minlength=v * v).double()
    target = (base.exp().T * cond.exp()).flatten().double()  # p0(a) * p1(b | a)
    stat, dof = chi_square_ok(counts, target)
    assert chi2_sf(stat, dof) > DELTA, stat
