"""The native sampling kernel (sample_rows.c) against PyTorch's draw and logsumexp, on every
thread count, and the engine's seeded sampling through it against the PyTorch path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metagen.decoding import SequenceState, decode_step
from metagen.decoding.sampler import inverse_cdf_sample
from metagen.engine.native import sample_rows as sr
from metagen.types import SamplingParams

from ._native_variants import load_variant, variants


@pytest.fixture(scope="module", params=variants(), ids=lambda v: v[0])
def kernel(request, tmp_path_factory) -> sr.SampleRows:
    return load_variant(sr.load_from, request.param, tmp_path_factory)


def _logits(seed: int, rows: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, vocab, generator=g) * (1 + seed % 5)
    x[:, seed % 7::7] = float("-inf")  # masked tokens: weight 0, never drawn
    return x


# Vocabularies of one partial block, exactly whole blocks, and a partial last block.
@pytest.mark.parametrize("vocab", [100, 256, 1000, 32000])
def test_draws_equal_pytorch_and_lse_is_logsumexp(kernel, vocab):
    """Golden over fixed seeds: every draw equals inverse_cdf_sample over torch.exp(x - max)
    (the kernel's exp differs from libm's by float32 rounding, so a draw could move only where
    its uniform falls within that rounding of a boundary: none of these 1,600 do); logsumexp
    to float64 within 1e-5, and logsumexp() equals the draw's bit for bit."""
    for seed in range(100):
        x = _logits(seed, 16, vocab)
        u = np.random.default_rng(seed).random(16)
        u[0] = 1.0 - 2.0**-53  # the very end of the CDF: the last token of positive weight
        want = inverse_cdf_sample(torch.exp(x - x.amax(-1, keepdim=True)), torch.from_numpy(u))
        tok, lse = kernel.draw(x, u)
        assert torch.equal(tok, want), seed
        assert torch.isfinite(x.gather(1, tok[:, None])).all()
        torch.testing.assert_close(lse, torch.logsumexp(x.double(), -1), rtol=0, atol=1e-5)
        assert torch.equal(kernel.logsumexp(x), lse)


@pytest.mark.parametrize("vocab", [5, 100, 256, 32000])
def test_argmax_is_torch_argmax_and_lse_is_logsumexp(kernel, vocab):
    """Golden over fixed seeds: the greedy token is torch.argmax's (the first index of the row's
    maximum, also where the maximum repeats or sits past the vector body), the logsumexp
    returned with it is logsumexp()'s bit for bit and the token's logprob is
    float32(max - logsumexp), which is finite exactly where the row's maximum is (a NaN in the
    vector body or its tail, a +inf and an all -inf row make it NaN), on any thread count."""
    for seed in range(50):
        x = _logits(seed, 12, vocab)
        x[1] = x[1].amax()  # every entry the maximum: index 0
        x[2, vocab // 2:] = x[2].amax() + 1  # a tie from the middle: its first index
        x[3, -1] = x[3].amax() + 1  # in the tail after the last whole vector
        x[9, seed % vocab] = float("nan")  # bad rows
        x[10, -1] = float("inf")
        x[11] = float("-inf")
        tok, lse, lp = kernel.argmax(x)
        assert tok[:9] == x[:9].argmax(-1).tolist(), seed
        assert lse[:9] == kernel.logsumexp(x[:9]).tolist()
        want = (x[:9].amax(-1).double() - torch.tensor(lse[:9], dtype=torch.float64)).float()
        assert lp[:9] == want.tolist()
        assert [math.isfinite(v) for v in lp] == [True] * 9 + [False] * 3
        again = kernel.on(3).argmax(x)
        assert again[0] == tok and again[1][:9] == lse[:9] and again[2][:9] == lp[:9]


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_any_thread_count_gives_the_same_draws(kernel, threads):
    x = _logits(3, 13, 5000)
    u = np.random.default_rng(3).random(13)
    one = kernel.on(1).draw(x, u)
    many = kernel.on(threads).draw(x, u)
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])


def test_bad_shapes_are_refused(kernel):
    with pytest.raises(ValueError, match="uniforms"):
        kernel.draw(torch.zeros(2, 10), np.zeros(3))
    with pytest.raises(ValueError, match="float32"):
        kernel.draw(torch.zeros(2, 10, dtype=torch.float64), np.zeros(2))


def test_decode_step_with_the_kernel_equals_pytorch(kernel):
    """decode_step's tokens are PyTorch's; the chosen logprobs agree to rounding, and exactly
    (log_softmax's value) on the rows that list their top-k; greedy and top-p rows mixed in."""
    x = _logits(11, 6, 2000)
    params = [SamplingParams(seed=5, temperature=1.0), SamplingParams(seed=5, logprobs=3),
              SamplingParams(temperature=0.0), SamplingParams(seed=2, top_p=0.9),
              SamplingParams(seed=9, temperature=0.7), SamplingParams(seed=1)]
    def states():
        return [SequenceState(p, [1, 2], sample_index=i) for i, p in enumerate(params)]
    want = decode_step(x, states())
    got = decode_step(x, states(), kernel)
    assert torch.equal(got.tokens, want.tokens)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=0, atol=1e-5)
    assert got.logprobs[1] == want.logprobs[1] and got.top_logprobs == want.top_logprobs


@pytest.mark.parametrize("case", ["plain", "bad rows", "logprobs", "penalty"])
def test_greedy_decode_step_with_the_kernel_equals_pytorch(kernel, case):
    """All-greedy batches, where one kernel pass is the whole step when no processor applies and
    no row lists its top-k: tokens are PyTorch's, logprobs agree to rounding (exactly on rows
    listing their top-k), bad rows (NaN, +inf, all -inf) fail alone, and the output's tensors and
    lists hold the same values."""
    x = _logits(4, 6, 3000)
    params = [SamplingParams(temperature=0.0)] * 6
    if case == "bad rows":
        x[1, 7], x[3, -1], x[4] = float("nan"), float("inf"), float("-inf")
    elif case == "logprobs":
        params = [*params[:2], SamplingParams(temperature=0.0, logprobs=3), *params[3:]]
    elif case == "penalty":
        params = [SamplingParams(temperature=0.0, repetition_penalty=1.5)] * 6

    def states():
        return [SequenceState(p, [1, 2, int(x[i].argmax())], sample_index=i)
                for i, p in enumerate(params)]
    want = decode_step(x, states())
    got = decode_step(x, states(), kernel)
    assert got.token_list() == want.tokens.tolist() and torch.equal(got.tokens, want.tokens)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=0, atol=1e-5, equal_nan=True)
    torch.testing.assert_close(torch.tensor(got.logprob_list()), got.logprobs, rtol=0, atol=0,
                               equal_nan=True)
    assert got.top_logprobs == want.top_logprobs and set(got.errors) == set(want.errors)
    assert set(got.errors) == ({1, 3, 4} if case == "bad rows" else set())
    if case == "logprobs":
        assert got.logprobs[2] == want.logprobs[2]


@pytest.mark.parametrize("params", [
    SamplingParams(n=8, temperature=1.0, top_p=1.0, max_tokens=24, seed=3),
    SamplingParams(n=8, temperature=0.8, max_tokens=24, seed=4, ignore_eos=True),  # one pass
    SamplingParams(n=8, temperature=1.2, max_tokens=24, seed=5, min_tokens=10, top_p=0.9),
], ids=["plain", "ignore_eos", "min_tokens+top_p"])
def test_engine_seeded_sampling_equals_the_pytorch_path(stories_engine_factory, params):
    """best-of-8 on stories260K (vocabulary 512): the engine with the native kernel samples the
    tokens of the engine without it, with logprobs equal to rounding."""
    native = stories_engine_factory()
    if native._sample_rows is None:
        pytest.skip("no native library on this machine")
    plain = stories_engine_factory()
    plain._sample_rows = None
    a = native.generate([[1, 403, 407, 271]], params)[0].outputs
    b = plain.generate([[1, 403, 407, 271]], params)[0].outputs
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for ca, cb in zip(a, b):
        np.testing.assert_allclose(ca.logprobs, cb.logprobs, rtol=0, atol=1e-4)
