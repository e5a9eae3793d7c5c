"""A sampled batch's step in one native pass per raw row (``SampleRows.draw_raw``, taken by
``decode_step`` when only masked ids and a temperature process the rows): bit for bit the values
of the general kernel path (the processed copy drawn by ``draw``, the raw logprob from
``logsumexp``), PyTorch's tokens, masked ids never drawn, bad and dead rows failing alone with a
typed error, on any thread count."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from metagen.decoding import SequenceState, decode_step
from metagen.engine.native import sample_rows as sr
from metagen.errors import NumericalError
from metagen.types import SamplingParams

from .test_sample_rows import _logits, kernel  # noqa: F401 (kernel: the fixture)


def _general_path(kernel, x, u, temps, masked):
    """The values of the path with a processed copy: -inf at the masked ids, the division, the
    draw over the copy, the raw logprob from the raw logsumexp."""
    y = x.clone()
    for b, ids in enumerate(masked or []):
        if ids:
            y[b, [i for i in ids if 0 <= i < x.shape[1]]] = float("-inf")
    if temps is not None:
        y = y / torch.tensor(temps, dtype=torch.float32)[:, None]
    tok, _ = kernel.draw(y, u)
    lse = kernel.logsumexp(x)
    lp = (x.gather(1, tok[:, None]).squeeze(1).double() - lse).float()
    return tok.tolist(), lp.tolist()


@pytest.mark.parametrize("vocab", [100, 256, 1000, 32000])
def test_draw_raw_is_the_general_path_bit_for_bit(kernel, vocab):
    """Golden over fixed seeds: tokens and logprobs equal the processed copy's exactly, with and
    without temperatures, with masked ids on each row's maximum (the maximum then sits on
    another token), duplicated and outside the vocabulary, and at the very end of the CDF."""
    for seed in range(40):
        x = _logits(seed, 8, vocab)
        u = np.random.default_rng(seed).random(8)
        u[0] = 1.0 - 2.0**-53
        top = x.argmax(-1).tolist()
        masked = [[top[0]], None, [top[2], top[2], -1, vocab + 3], [seed % vocab, top[3]],
                  [], None, [vocab - 1], [top[7], (top[7] + 1) % vocab]]
        for temps in (None, [0.7, 1.0, 1.3, 0.05, 2.0, 1.0, 0.5, 0.9]):
            for m in (None, masked):
                got = kernel.draw_raw(x, u, temps, m)
                assert got == _general_path(kernel, x, u, temps, m), (seed, temps, m)
                if m:
                    assert all(t not in (ids or []) for t, ids in zip(got[0], m))


@pytest.mark.parametrize("threads", [2, 3])
def test_any_thread_count_gives_the_same_values(kernel, threads):
    x = _logits(5, 13, 5000)
    u = np.random.default_rng(5).random(13)
    masked = [[int(x[b].argmax())] for b in range(13)]
    one = kernel.on(1).draw_raw(x, u, [0.8] * 13, masked)
    assert kernel.on(threads).draw_raw(x, u, [0.8] * 13, masked) == one


def test_bad_and_dead_rows_are_flagged(kernel):
    """-2 for a NaN, a +inf (also on a masked id) or an all -inf row; -1 where every finite
    logit is masked or the division overflows; a NaN logprob for both, the other rows as alone."""
    x = _logits(2, 8, 600)
    x[1, 5] = float("nan")
    x[2, 599] = float("inf")
    x[3] = float("-inf")
    x[4] = float("-inf")
    x[4, 10] = 1.0  # its one finite logit masked below
    x[5, 3] = 1e37  # / 1e-5 overflows
    x[6, 17] = float("inf")  # +inf on a masked id is still a bad row
    u = np.random.default_rng(2).random(8)
    temps = [1.0, 1.0, 1.0, 1.0, 1.0, 1e-5, 1.0, 0.5]
    masked = [None, None, None, None, [10], None, [17], [int(x[7].argmax())]]
    tok, lp = kernel.draw_raw(x, u, temps, masked)
    assert tok[1:7] == [-2, -2, -2, -1, -1, -2]
    assert [math.isnan(v) for v in lp] == [False] + [True] * 6 + [False]
    ok = [0, 7]
    want = _general_path(kernel, x[ok], u[ok], [temps[b] for b in ok], [masked[b] for b in ok])
    assert ([tok[b] for b in ok], [lp[b] for b in ok]) == want


def test_masked_ids_are_never_drawn(kernel):
    """The three most likely tokens of a peaked row (together > 0.999 of its mass) masked:
    none of 4,000 draws is one of them."""
    x = torch.zeros(1, 500)
    x[0, [3, 250, 499]] = 15.0
    u = np.random.default_rng(0).random(4000)
    rows = x.expand(4000, 500).contiguous()
    tok, _ = kernel.draw_raw(rows, u, None, [[3, 250, 499]] * 4000)
    assert not {3, 250, 499} & set(tok)
    assert torch.softmax(x, -1)[0, [3, 250, 499]].sum() > 0.999


def _states(params, eos=(), outputs=0):
    return [SequenceState(p, [1, 2], output_ids=list(range(outputs)), sample_index=i,
                          eos_token_ids=eos) for i, p in enumerate(params)]


@pytest.mark.parametrize("case", ["plain", "temperature", "ignore_eos", "min_tokens", "bad rows"])
def test_decode_step_in_one_pass_equals_the_other_paths(kernel, case):
    """decode_step on the one-pass path: the general kernel path's tokens and logprobs bit for bit
    (a logprobs=1 row makes the same batch take the general path: its own row compared apart),
    PyTorch's tokens and its logprobs to 1e-5, and the bad rows' NumericalError."""
    x = _logits(7, 6, 3000)
    eos = (int(x[0].argmax()), int(x[1].argmax()), 7)
    kw = {"plain": {}, "temperature": {"temperature": 0.6},
          "ignore_eos": {"ignore_eos": True, "temperature": 1.4},
          "min_tokens": {"min_tokens": 5, "stop_token_ids": [int(x[2].argmax())]},
          "bad rows": {"temperature": 0.9}}[case]
    params = [SamplingParams(seed=3 + i, max_tokens=20, **kw) for i in range(6)]
    if case == "bad rows":
        x[1, 9], x[4, -1] = float("nan"), float("inf")
    calls = []

    class Spy(sr.SampleRows):  # the real kernel, counting its one-pass calls
        def draw_raw(self, *a):
            calls.append(a)
            return super().draw_raw(*a)

    spy = Spy(kernel._lib, kernel.threads)
    got = decode_step(x, _states(params, eos, 2), spy)
    assert len(calls) == 1  # the step took the one-pass path
    want = decode_step(x, _states(params, eos, 2))
    assert got.token_list() == want.token_list() and set(got.errors) == set(want.errors)
    torch.testing.assert_close(got.logprobs, want.logprobs, rtol=0, atol=1e-5, equal_nan=True)
    assert set(got.errors) == ({1, 4} if case == "bad rows" else set())
    assert all(isinstance(e, NumericalError) for e in got.errors.values())
    for b in range(6):  # the general kernel path, row by row (a listed top-k forces it)
        listed = [SamplingParams(seed=3 + i, max_tokens=20, logprobs=1 if i == b else None, **kw)
                  for i in range(6)]
        general = decode_step(x, _states(listed, eos, 2), kernel)
        if b not in got.errors:
            assert general.token_list()[b] == got.token_list()[b]
            assert general.logprob_list()[b] == pytest.approx(got.logprob_list()[b], abs=1e-6)


def test_kernel_uniforms_equal_the_python_hash(kernel):
    """The C hash gives rng.uniforms_for's doubles bit for bit: small, large (up to 2**64 - 1,
    and past it: taken mod 2**64) and random seeds, indices and steps."""
    from metagen.decoding.rng import uniform_for

    rng = np.random.default_rng(0)
    big = [0, 1, 2**63 - 1, 2**64 - 1, 2**64 + 5]
    seeds = big + [int(v) for v in rng.integers(0, 2**63 - 1, 200)]
    n = len(seeds)
    indices = [int(v) for v in rng.integers(0, 64, n)]
    steps = [int(v) for v in rng.integers(0, 4096, n)]
    indices[:5], steps[:5] = big[::-1], big
    got = kernel.uniforms(seeds, indices, steps)
    assert got.tolist() == [uniform_for(s, i, t) for s, i, t in zip(seeds, indices, steps)]
    assert kernel.uniforms([], [], []).shape == (0,)
