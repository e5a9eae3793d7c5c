"""Bad requests fail alone (V9, V14-V17, V22, V24); memory pressure never crashes."""

from __future__ import annotations

import random

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.models import load_model
from metagen.errors import InvalidParameterError, InvalidPromptError, NumericalError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

GOOD = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def llama(random_model_dir):
    return load_model(random_model_dir("llama"))


def _engine(model, **options):
    return build_engine(model, None, EngineConfig(device="cpu", **options))


def _prompts(n, seed, lo=2, hi=30):
    rng = random.Random(seed)
    return [[1] + [rng.randrange(3, 96) for _ in range(rng.randrange(lo, hi))] for _ in range(n)]


@pytest.mark.parametrize("prompt", [[], [-1], [96], [[]], "text", [1, 2.5], [True], None])
def test_v16_bad_prompt_rejected_and_engine_keeps_serving(llama, prompt):
    engine = _engine(llama)
    with pytest.raises(InvalidPromptError):
        engine.add_request(prompt, GOOD)
    assert not engine.has_unfinished()
    assert engine.generate([[1, 5, 6]], GOOD)[0].error is None


def test_v17_v9_too_long_rejected_with_both_numbers(llama):
    engine = _engine(llama, max_model_len=64)
    with pytest.raises(InvalidPromptError, match="maximum context length is 64"):
        engine.add_request([5] * 64, GOOD)
    with pytest.raises(InvalidParameterError, match=r"prompt \(60 tokens\).*max_tokens \(12\)"):
        engine.add_request([5] * 60, GOOD)
    assert engine.generate([[5] * 52], GOOD)[0].outputs[0].finish_reason == "length"


@pytest.mark.parametrize("change", [{"stop_token_ids": (96,)}, {"allowed_token_ids": (1, 500)},
                                    {"logit_bias": {96: 1.0}}, {"stop": ("x",)}])
def test_v14_v15_out_of_vocab_ids_and_text_options_without_tokenizer(llama, change):
    engine = _engine(llama)
    with pytest.raises(InvalidParameterError):
        engine.add_request([1, 5], GOOD.with_(**change))
    assert engine.generate([[1, 5]], GOOD)[0].error is None


def _nan_for(prompt):
    """A logits hook that turns the logits of one prompt's rows into NaN (scripted fault)."""
    def hook(logits, states):
        for i, st in enumerate(states):
            if st.prompt_ids == prompt:
                logits[i] = float("nan")
        return logits
    return hook


@pytest.mark.parametrize("params", [GOOD, SamplingParams(temperature=0.9, seed=3, max_tokens=12)])
def test_v22_v24_injected_nan_fails_one_request_only(llama, params):
    prompts = _prompts(16, seed=1)
    bad = [1, 77, 78, 79]
    clean = _engine(llama).generate(prompts, params)
    engine = _engine(llama)
    engine.logits_hook = _nan_for(bad)
    outs = engine.generate(prompts[:8] + [bad] + prompts[8:], params)
    failed = outs.pop(8)
    assert isinstance(failed.error, NumericalError)
    assert failed.outputs[0].finish_reason == "error"
    for a, b in zip(outs, clean):
        assert a.error is None and a.outputs[0].token_ids == b.outputs[0].token_ids
    engine.logits_hook = None
    assert engine.generate([bad], params)[0].error is None  # the engine keeps serving
    engine.check_integrity()


def test_v24_invalid_request_among_sixteen_good(llama):
    engine = _engine(llama)
    ids = [engine.add_request(p, GOOD) for p in _prompts(8, seed=2)]
    with pytest.raises(InvalidPromptError):
        engine.add_request([1, 10**6], GOOD)
    ids += [engine.add_request(p, GOOD) for p in _prompts(8, seed=3)]
    outs = engine.run_until_done(ids)
    ref = _engine(llama).generate(_prompts(8, seed=2) + _prompts(8, seed=3), GOOD)
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in ref]


def test_abort_frees_blocks(llama):
    engine = _engine(llama, block_size=4, prefix_cache=False)
    rid = engine.add_request([1] + [5] * 20, SamplingParams(temperature=0.0, max_tokens=50))
    keep = engine.add_request([1, 6, 7], GOOD)
    for _ in range(4):
        engine.step()
    engine.abort(rid)
    engine.check_integrity()
    assert engine.run_until_done([keep])[0].error is None
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_stress_tight_memory_preempts_and_frees_everything(llama):
    """200 requests of random lengths (some n > 1) through 40 blocks of 4 tokens."""
    rng = random.Random(0)
    prompts = _prompts(200, seed=4, lo=1, hi=40)
    params = [SamplingParams(temperature=0.0, max_tokens=rng.randrange(1, 30), ignore_eos=True)
              if i % 5 else SamplingParams(temperature=1.0, n=3, seed=i, max_tokens=10,
                                                   ignore_eos=True)
              for i in range(len(prompts))]
    engine = _engine(llama, block_size=4, num_blocks=40, max_num_seqs=24,
                     max_num_batched_tokens=48)
    ids, scored = [], []
    for i, (p, sp) in enumerate(zip(prompts, params)):
        ids.append(engine.add_request(p, sp))
        if i < 20:  # scoring requests interleaved with the first ones (they get preempted too)
            scored.append(engine.add_scoring_request(p + [7] * 12, len(p)))
    outs = {}
    while engine.has_unfinished():
        for out in engine.step():
            outs[out.request_id] = out
        engine.check_integrity()
        assert engine.blocks.num_free >= 0
    assert len(outs) == len(ids) + len(scored)
    assert engine.counters.preemptions > 0
    ref_scores = _engine(llama).score(prompts[:20], [[[7] * 12]] * 20)
    for rid, ref in zip(scored, ref_scores):
        assert abs(outs[rid].scores[0] - ref[0]) < FLOAT_LOGPROB_TOL
    assert all(o.error is None for o in outs.values())
    for rid, sp in zip(ids, params):
        assert all(len(c.token_ids) == sp.max_tokens for c in outs[rid].outputs)
    engine.radix.evict(engine.blocks.num_blocks)
    assert engine.blocks.num_free == engine.blocks.num_blocks
    # greedy outputs do not depend on memory pressure
    roomy = _engine(llama, block_size=4).generate(prompts[1:40:5], params[1:40:5])
    assert [o.outputs[0].token_ids for o in roomy] == \
        [outs[r].outputs[0].token_ids for r in ids[1:40:5]]


def test_kv_budget_is_respected(llama):
    engine = _engine(llama, kv_cache_bytes=200_000)
    assert engine.kv.nbytes <= 200_000
    assert engine.max_model_len <= engine.blocks.num_blocks * engine.config.block_size


def test_truncate_then_continue_equals_uninterrupted(llama):
    prompt = [1, 9, 8, 7, 6, 5]
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    ref = _engine(llama).generate([prompt], params)[0].outputs[0].token_ids
    engine = _engine(llama, block_size=4)
    rid = engine.add_request(prompt, params)
    for _ in range(15):
        engine.step()
    seq = engine.requests[rid].seqs[0]
    engine.truncate(seq.seq_id, len(prompt) + 5)
    engine.check_integrity()
    assert tuple(seq.state.output_ids) == ref[:5]
    assert engine.run_until_done([rid])[0].outputs[0].token_ids == ref


def test_score_matches_manual_log_likelihood(llama, random_model_dir):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(random_model_dir("llama"), dtype=torch.float32)
    prompt = [1] + list(range(10, 40))
    conts = [[5, 6, 7], [8], list(range(50, 70))]
    engine = _engine(llama, block_size=8)
    got = engine.score([prompt], [conts + [[]]])[0]
    with torch.no_grad():
        for c, g in zip(conts, got):
            lp = torch.log_softmax(hf(torch.tensor([prompt + c])).logits[0].float(), -1)
            ref = sum(float(lp[len(prompt) - 1 + k, t]) for k, t in enumerate(c))
            assert abs(ref - g) < FLOAT_LOGPROB_TOL
    assert got[-1] == 0.0
    # the prompt was prefilled once and cached: 3 whole blocks are shared by the continuations
    assert engine.counters.computed_tokens == len(prompt) + sum(len(c) + 7 for c in conts)


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    return None


def test_peak_memory_within_kv_budget_plus_constant(llama):
    """Peak RSS growth while serving stays under the KV budget + 128 MiB (transient tensors are
    bounded by the runner's row chunks). Linux only: resets the peak via /proc/self/clear_refs."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM (the peak resident set) to the current RSS
    except OSError:
        pytest.skip("cannot reset the peak RSS on this system")
    base = _status_kib("VmRSS")
    budget = 8 << 20
    engine = _engine(llama, kv_cache_bytes=budget, max_num_batched_tokens=4096)
    prompts = _prompts(24, seed=8, lo=100, hi=400)
    engine.generate(prompts, SamplingParams(temperature=0.5, n=2, seed=0, max_tokens=8,
                                            ignore_eos=True))
    growth = (_status_kib("VmHWM") - base) * 1024
    assert growth <= budget + (128 << 20), f"peak grew by {growth / 2**20:.0f} MiB"
