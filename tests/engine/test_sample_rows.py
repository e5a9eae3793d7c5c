"""The native sampling kernel (sample_rows.c) against PyTorch's draw and logsumexp, on every
thread count, and the engine's seeded sampling through it against the PyTorch path."""

from __future__ import annotations

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
    maximum, also where the maximum repeats or sits past the vector body), and the logsumexp
    returned with it is logsumexp()'s bit for bit, on any thread count."""
    for seed in range(50):
        x = _logits(seed, 9, vocab)
        x[1] = x[1].amax()  # every entry the maximum: index 0
        x[2, vocab // 2:] = x[2].amax() + 1  # a tie from the middle: its first index
        x[3, -1] = x[3].amax() + 1  # in the tail after the last whole vector
        tok, lse = kernel.argmax(x)
        assert torch.equal(tok, x.argmax(-1)), seed
        assert torch.equal(lse, kernel.logsumexp(x))
        assert all(torch.equal(a, b) for a, b in zip(kernel.on(3).argmax(x), (tok, lse)))


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


def test_engine_seeded_sampling_equals_the_pytorch_path(stories_engine_factory):
    """best-of-8 on stories260K (vocabulary 512): the engine with the native kernel samples the tokens of the
    engine without it, with logprobs equal to rounding."""
    params = SamplingParams(n=8, temperature=1.0, top_p=1.0, max_tokens=24, seed=3)
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
