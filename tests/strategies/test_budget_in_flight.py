"""Budgets kept where the compute is spent, on real models (stories260K on the built-in engine and
through transformers): FLOP, token and time limits stop a one-call strategy in flight, and each
prompt of a batch is charged what its own requests used."""

from __future__ import annotations

import time

import pytest

from metagen.generators.flops import FlopModel
from metagen.generators.tokenize import encode_prompt
from metagen.strategies import Budget, best_of_n
from metagen.types import SamplingParams

LONG = SamplingParams(temperature=1.0, max_tokens=100, seed=3, ignore_eos=True)
PROMPTS = ["Once upon a time", "The little dog ran to the park and"]


def no_reward(prompt: object, text: str) -> float:
    return 0.0


@pytest.fixture(scope="module", params=["local", "hf"])
def gen(request, stories_path):
    if request.param == "local":
        from metagen.generators.local import LocalGenerator
        g = LocalGenerator.from_pretrained(stories_path)
        yield g
        g.close()
    else:
        from metagen.generators.hf import HFGenerator
        yield HFGenerator.from_pretrained(stories_path)


def test_flop_budget_below_one_prefill_draws_no_sample(gen):
    before = gen.usage
    res = best_of_n(gen, PROMPTS[0], n=4, reward=no_reward, params=LONG,
                    budget=Budget(max_flops=1))
    spent = gen.usage - before
    assert res.best is None and res.candidates == [] and res.stopped_by_budget
    assert res.trace["not_drawn"] == 4
    assert spent.calls == 0 and spent.generator_flops == 0 and spent.generated_tokens == 0


def test_flop_budget_is_kept_in_flight(gen):
    # on stories260K (2.6e5 matmul parameters) the 5-token prompt's prefill costs ~2.6e6 FLOPs
    # and a token up to ~6.7e5: a limit of 2e7 pays for some tokens, far fewer than 4 x 100
    limit = 2e7
    res = best_of_n(gen, PROMPTS[0], n=4, reward=no_reward, params=LONG,
                    budget=Budget(max_flops=limit))
    assert res.stopped_by_budget and res.candidates
    assert all(c.stop_reason == "budget" for c in res.candidates)
    assert 0 < res.usage.generator_flops <= limit


@pytest.mark.parametrize("prompts", [PROMPTS[:1], PROMPTS])
def test_token_budget_is_a_pool_of_generated_tokens(gen, prompts):
    # before, the cap assumed every sample runs to max_tokens and drew 200 // 100 = 2 samples
    # (none at all with max_tokens above 200)
    res = best_of_n(gen, prompts, n=4, reward=no_reward, params=LONG,
                    budget=Budget(max_generated_tokens=200))
    cands = [c for r in res for c in r.candidates]
    assert len(cands) == 4 * len(prompts)
    assert sum(c.num_tokens for c in cands) == 200  # ignore_eos: the pool is spent exactly
    assert all(c.finish_reason == "length" and c.stop_reason == "budget" for c in cands)
    assert sum(r.usage.generated_tokens for r in res) == 200
    assert all(r.stopped_by_budget for r in res)


def test_token_pool_left_by_a_sample_that_ends_goes_to_the_others(gen):
    eos = int(gen.tokenizer.eos_token_id)

    def end_sample_zero_at_six(logits, states):  # EOS for sample 0 as its 6th token, else never
        logits = logits.clone()
        for i, s in enumerate(states):
            if s.sample_index == 0 and len(s.output_ids) == 5:
                logits[i] = float("-inf")
                logits[i, eos] = 0.0
            else:
                logits[i, eos] = float("-inf")
        return logits

    gen.logits_hook = end_sample_zero_at_six
    try:
        res = best_of_n(gen, PROMPTS[0], n=4, reward=no_reward,
                        params=SamplingParams(temperature=1.0, max_tokens=100, seed=3),
                        budget=Budget(max_generated_tokens=120))
    finally:
        gen.logits_hook = None
    first, *rest = res.candidates
    assert first.finish_reason == "stop" and first.num_tokens == 6
    # equal shares would give each 120 / 4 = 30; the pool gives the other three what sample 0
    # left: (120 - 6) / 3 = 38 each, decoded in lockstep
    assert [c.num_tokens for c in rest] == [38, 38, 38]
    assert all(c.stop_reason == "budget" for c in rest)
    assert res.usage.generated_tokens == 120


def test_deadline_stops_a_long_generation(gen):
    # the logits hook waits out the whole budget once the sample has 10 tokens, so the
    # deadline has passed by the next step boundary, whatever the machine's speed
    seconds = 1.0
    waited = []

    def wait_at_ten(logits, states):
        if not waited and len(states[0].output_ids) >= 10:
            waited.append(True)
            time.sleep(seconds)
        return logits

    gen.logits_hook = wait_at_ten
    try:
        params = SamplingParams(temperature=1.0, max_tokens=400, seed=3, ignore_eos=True)
        res = best_of_n(gen, PROMPTS[0], n=1, reward=no_reward, params=params,
                        budget=Budget(max_seconds=seconds))
    finally:
        gen.logits_hook = None
    assert res.stopped_by_budget
    [c] = res.candidates
    assert c.finish_reason == "length" and c.stop_reason == "budget"
    assert c.num_tokens <= 11 < params.max_tokens  # the token chosen while waiting, no more


def test_per_prompt_usage_is_each_prompts_own(gen):
    params = SamplingParams(temperature=1.0, max_tokens=12, seed=5)
    prompts = ["Tom had a red ball", "Lily and her mom went to the big shop to buy"]
    tokens = [encode_prompt(gen.tokenizer, p) for p in prompts]  # not seen before: no cache hit
    res = best_of_n(gen, prompts, n=3, reward=no_reward, params=params)
    batch = res[0].trace["batch_usage"]
    for field in ("prompt_tokens", "generated_tokens", "calls", "cached_prompt_tokens"):
        assert sum(getattr(r.usage, field) for r in res) == batch[field]
    # FLOPs are whole numbers below 2**53 here: float sums of them are exact
    assert sum(r.usage.generator_flops for r in res) == batch["generator_flops"]
    assert [r.usage.calls for r in res] == [1, 0]  # one call, counted on the first prompt
    rows = 3 if type(gen).__name__ == "HFGenerator" else 1  # transformers prefills every row
    mc = gen.engine.model.cfg if rows == 1 else None
    model = gen.flop_model if mc is None else FlopModel(mc.num_params, mc.num_layers,
                                                        mc.num_heads * mc.head_dim)
    for r, ids in zip(res, tokens):
        assert r.usage.prompt_tokens == rows * len(ids)
        assert r.usage.generated_tokens == sum(c.num_tokens for c in r.candidates)
        p = len(ids)
        # each sample's tokens but its last are fed back at positions p, p + 1, ...; the
        # prompt is prefilled once per row (no cache hit: cached_prompt_tokens is 0)
        assert r.usage.cached_prompt_tokens == 0
        want = rows * model.forward(0, p) + sum(model.forward(p, c.num_tokens - 1)
                                                for c in r.candidates)
        assert r.usage.generator_flops == want
