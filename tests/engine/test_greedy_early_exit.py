"""Plain greedy rows (greedy, no top-k listed, at most end tokens removed by id) take one native
argmax pass as their whole step: ``greedy_step`` in the engine, decided once per sequence
(``plain_greedy``), and the all-greedy shortcut of ``decode_step`` when only ids removed by id
apply. Both must give today's path's tokens and logprobs bit for bit, fall back to it where the
pass is not the step (a bad row, an argmax on a removed id), and never write the caller's
logits."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.decoding import SequenceState, decode_step
from metagen.decoding import sampler as sampler_mod
from metagen.decoding.masks import suppressed_end_tokens
from metagen.decoding.processors import plain_greedy
from metagen.decoding.sampler import greedy_step
from metagen.types import SamplingParams

from .test_sample_rows import kernel  # noqa: F401 (the fixture: each ISA variant)

GREEDY = SamplingParams(temperature=0.0, max_tokens=40)


def _reference(monkeypatch, x, states, kernel):
    """decode_step as before the shortcut: the masked copy and the general path."""
    with monkeypatch.context() as m:
        m.setattr(sampler_mod, "_argmax_stands", lambda *a: False)
        return decode_step(x, states, kernel)


def _logits(seed: int, rows: int, vocab: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, vocab, generator=g) * (1 + seed % 4)


@pytest.mark.parametrize("case", ["ignore_eos", "min_tokens", "bad_words", "bad rows", "mixed"])
def test_all_greedy_masked_batch_is_the_general_path_bit_for_bit(kernel, monkeypatch, case):
    """Rows whose argmax is a removed id and rows whose argmax is not, over 20 seeds: tokens,
    logprobs (as lists, so bit for bit) and errors equal the masked-copy path's; the caller's
    logits are unchanged, also as inference-mode memory."""
    for seed in range(20):
        with torch.inference_mode():
            x = _logits(seed, 6, 700)
        top = x.argmax(-1).tolist()
        states = []
        for b in range(6):
            eos = (top[b],) if b % 2 == 0 else (699,)  # even rows: the argmax is EOS
            p = {"ignore_eos": GREEDY.with_(ignore_eos=True),
                 "min_tokens": GREEDY.with_(min_tokens=5, stop_token_ids=(3,)),
                 "bad_words": GREEDY, "bad rows": GREEDY.with_(ignore_eos=True),
                 "mixed": GREEDY.with_(ignore_eos=b < 3, repetition_penalty=1.0 + (b == 5))
                 }[case]
            bad = ((top[b],),) if case == "bad_words" and b % 3 == 0 else ()
            states.append(SequenceState(p, [1, 2], output_ids=[7] * (seed % 8),
                                        eos_token_ids=eos, bad_words_ids=bad))
        if case == "bad rows":
            with torch.inference_mode():
                x = x.clone()
                x[1, 5], x[4] = float("nan"), float("-inf")
        before = x.clone()
        want = _reference(monkeypatch, x, states, kernel)
        got = decode_step(x, states, kernel)
        assert got.token_list() == want.token_list(), (case, seed)
        assert [str(v) for v in got.logprob_list()] == [str(v) for v in want.logprob_list()]
        assert set(got.errors) == set(want.errors) and got.top_logprobs == want.top_logprobs
        torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)  # unchanged


def test_greedy_step_is_decode_step_or_refuses(kernel, monkeypatch):
    """greedy_step gives decode_step's values exactly where it answers, and answers None on a
    row that is not plain greedy, a bad row, an argmax on a removed id, or a shape mismatch;
    it never writes the logits."""
    answered = 0
    for seed in range(40):
        x = _logits(seed, 4, 500)
        top = x.argmax(-1).tolist()
        eos = (top[0],) if seed % 4 == 0 else (2,)
        n_out = seed % 6
        p = GREEDY.with_(ignore_eos=seed % 2 == 0, min_tokens=3 * (seed % 3))
        states = [SequenceState(p, [1], output_ids=[5] * n_out, eos_token_ids=eos)
                  for _ in range(4)]
        if seed % 5 == 1:
            x[2, 9] = float("inf")
        before = x.clone()
        plans = [plain_greedy(s) for s in states]
        got = greedy_step(x, states, plans, kernel)
        want = _reference(monkeypatch, x, states, kernel)
        removed = top[0] in eos and (p.ignore_eos or n_out < p.min_tokens)
        assert (got is None) == (removed or seed % 5 == 1), seed
        if got is not None:
            answered += 1
            assert got[0] == want.token_list()
            assert [str(v) for v in got[1]] == [str(v) for v in want.logprob_list()]
        torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)
    assert answered >= 10
    x = _logits(0, 2, 50)
    s = SequenceState(GREEDY, [1])
    assert greedy_step(x, [s, s], [plain_greedy(s), None], kernel) is None
    assert greedy_step(x, [s], [plain_greedy(s)], kernel) is None  # 2 rows for 1 sequence
    assert greedy_step(x.double(), [s, s], [plain_greedy(s)] * 2, kernel) is None


@pytest.mark.parametrize("change", [
    {"temperature": 0.7}, {"logprobs": 0}, {"repetition_penalty": 1.1},
    {"presence_penalty": 0.5}, {"frequency_penalty": -0.5}, {"logit_bias": {3: 1.0}},
    {"allowed_token_ids": (3, 4)}, {"no_repeat_ngram_size": 2}])
def test_plain_greedy_refuses_every_processor(change):
    assert plain_greedy(SequenceState(GREEDY.with_(**change), [1])) is None


def test_plain_greedy_removes_what_the_pipeline_removes():
    assert plain_greedy(SequenceState(GREEDY, [1], bad_words_ids=((4,),))) is None
    for ignore_eos in (False, True):
        for min_tokens in (0, 3):
            p = GREEDY.with_(ignore_eos=ignore_eos, min_tokens=min_tokens, stop_token_ids=(9,))
            plan = plain_greedy(SequenceState(p, [1], eos_token_ids=(2, 5)))
            assert plan is not None
            for step in range(6):
                want = set(suppressed_end_tokens(step, min_tokens, ignore_eos, (2, 5), (9,)))
                assert {t for t in range(12) if plan.removes(t, step)} == want


def _mixed_requests() -> list[SamplingParams]:
    """Plain greedy rows (with and without end tokens removed) batched with rows that do have
    processors."""
    return [GREEDY, GREEDY.with_(ignore_eos=True), GREEDY.with_(min_tokens=12),
            GREEDY.with_(repetition_penalty=1.3), GREEDY.with_(logprobs=2),
            GREEDY.with_(bad_words=("the",)),
            SamplingParams(temperature=0.9, max_tokens=40, seed=11, ignore_eos=True)]


def _generate(engine, prompts, params):
    ids = [engine.add_request(p, sp) for p, sp in zip(prompts, params)]
    done = {}
    while engine.has_unfinished():
        for out in engine.step():
            done[out.request_id] = out
    return [[(c.token_ids, [str(v) for v in c.logprobs], c.finish_reason)
             for c in done[i].outputs] for i in ids]


@pytest.mark.parametrize("mix", ["greedy only", "mixed"])
def test_engine_greedy_early_exit_is_bit_for_bit(stories_engine_factory, monkeypatch, mix):
    """stories260K: greedy requests one at a time, batched, and batched with requests that have
    processors give the same tokens, logprobs (bit for bit) and finish reasons with the early
    exit as through decode_step alone (batched against batched, single against single: batch
    composition itself may move logits by rounding); the early exit is taken."""
    from metagen.engine.llm_engine import LLMEngine

    fast = stories_engine_factory()
    if fast._sample_rows is None:
        pytest.skip("no native library on this machine")
    slow = stories_engine_factory()
    params = _mixed_requests() if mix == "mixed" else _mixed_requests()[:3]
    prompts = [[1, 403, 407, 271 + 13 * i] for i in range(len(params))]
    taken = []
    orig = LLMEngine._sample_greedy

    def counted(self, rows, row_logits):
        hit = orig(self, rows, row_logits)
        taken.append(hit)
        return hit

    monkeypatch.setattr(LLMEngine, "_sample_greedy", counted)
    got = _generate(fast, prompts, params)
    got_single = [_generate(fast, [p], [sp])[0] for p, sp in zip(prompts[:3], params[:3])]
    assert any(taken)
    monkeypatch.setattr(LLMEngine, "_sample_greedy", lambda *a: False)
    want = _generate(slow, prompts, params)
    want_single = [_generate(slow, [p], [sp])[0] for p, sp in zip(prompts[:3], params[:3])]
    assert got == want and got_single == want_single


def test_random_llama_greedy_ignore_eos_is_bit_for_bit(random_model_dir, monkeypatch):
    """A random-weight Llama of 96 tokens, whose argmax is often EOS: ignore_eos then falls back
    to decode_step on those steps; tokens and logprobs are the same bit for bit either way."""
    from metagen.engine.config import EngineConfig
    from metagen.engine.llm_engine import LLMEngine
    from metagen.engine.models import load_model

    model = load_model(random_model_dir("llama"))
    fast = build_engine(model, None, EngineConfig(device="cpu", block_size=8))
    if fast._sample_rows is None:
        pytest.skip("no native library on this machine")
    slow = build_engine(model, None, EngineConfig(device="cpu", block_size=8))
    params = [SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True),
              SamplingParams(temperature=0.0, max_tokens=60, min_tokens=30),
              SamplingParams(temperature=0.0, max_tokens=60)]
    prompts = [[1, 5 + i, 17, 40 + 3 * i] for i in range(3)]
    got = _generate(fast, prompts, params)
    monkeypatch.setattr(LLMEngine, "_sample_greedy", lambda *a: False)
    want = _generate(slow, prompts, params)
    assert got == want


def test_sampled_rows_listing_top_k_take_the_one_pass(kernel, monkeypatch):
    """A sampled batch with masked ids, temperatures 1 and otherwise, and rows listing their
    top-k (0, 3) is the one-pass draw, no masked copy: tokens, logprobs (bit for bit), top-k
    dicts and errors equal the general path's; the caller's logits are unchanged."""
    calls = []
    orig = kernel.draw_raw
    monkeypatch.setattr(kernel, "draw_raw", lambda *a: calls.append(1) or orig(*a))
    for seed in range(20):
        with torch.inference_mode():
            x = _logits(seed, 5, 600)
            if seed % 4 == 0:
                x = x.clone()
                x[3, 2] = float("nan")
        top = x.argmax(-1).tolist()
        params = [SamplingParams(temperature=1.0 if b % 2 else 0.7, seed=seed, max_tokens=9,
                                 ignore_eos=b < 3, logprobs=(None, 0, 3)[b % 3])
                  for b in range(5)]
        states = [SequenceState(p, [1], sample_index=b, eos_token_ids=(top[b],))
                  for b, p in enumerate(params)]
        before = x.clone()
        got = decode_step(x, states, kernel)
        with monkeypatch.context() as m:
            m.setattr(sampler_mod, "masks_and_temperature_only", lambda *a: False)
            want = decode_step(x, states, kernel)
        assert got.token_list() == want.token_list()
        assert [str(v) for v in got.logprob_list()] == [str(v) for v in want.logprob_list()]
        assert got.top_logprobs == want.top_logprobs and set(got.errors) == set(want.errors)
        assert any(got.top_logprobs)
        torch.testing.assert_close(x, before, rtol=0, atol=0, equal_nan=True)
    assert len(calls) == 20
