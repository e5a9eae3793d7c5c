"""The composed pipeline: order vs a transformers processor chain, per-row heterogeneity,
greedy semantics, mirostat by hand, and per-row numerical errors."""

from __future__ import annotations

import math

import torch
from transformers.generation.logits_process import (
    EpsilonLogitsWarper, EtaLogitsWarper, LogitsProcessorList, MinNewTokensLengthLogitsProcessor,
    MinPLogitsWarper, NoBadWordsLogitsProcessor, NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor, TemperatureLogitsWarper,
    TopKLogitsWarper, TopPLogitsWarper, TypicalLogitsWarper,
)

from metagen.decoding import (
    SequenceState, decode_step, probs_for_sampling, process_logits,
)
from metagen.errors import InvalidParameterError, NumericalError

from ._batches import random_batch
from metagen.types import SamplingParams

V = 48
NEG_INF = float("-inf")


def logits_for(rows: int, seed: int, scale: float = 2.0) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * scale


def test_full_chain_equals_transformers_chain_in_documented_order():
    prompt, output = [1, 2, 3, 4, 1, 2], [5, 6, 5]
    params = SamplingParams(
        temperature=0.8, top_k=30, top_p=0.97, min_p=0.01, typical_p=0.98, epsilon_cutoff=1e-4,
        eta_cutoff=1e-4, repetition_penalty=1.2, no_repeat_ngram_size=2, min_tokens=5,
        logit_bias={7: 1.5, 8: -2.0})
    seq = SequenceState(params, prompt, output, eos_token_ids=(0,), bad_words_ids=((6, 9),),
                        rng_seed=1)
    ids = torch.tensor([prompt + output])
    chain = LogitsProcessorList([
        SequenceBiasLogitsProcessor([[[7], 1.5], [[8], -2.0]]),
        NoBadWordsLogitsProcessor([[6, 9]]),
        NoRepeatNGramLogitsProcessor(2),
        MinNewTokensLengthLogitsProcessor(len(prompt), 5, [0]),
        RepetitionPenaltyLogitsProcessor(1.2),
        TemperatureLogitsWarper(0.8), TopKLogitsWarper(30), TopPLogitsWarper(0.97),
        MinPLogitsWarper(0.01), TypicalLogitsWarper(0.98), EpsilonLogitsWarper(1e-4),
        EtaLogitsWarper(1e-4),
    ])
    for seed in range(5):
        logits = logits_for(1, seed)
        ours = process_logits(logits, [seq])
        ref = chain(ids, logits.clone())
        assert torch.equal(torch.isneginf(ours), torch.isneginf(ref))
        keep = ~torch.isneginf(ref)
        torch.testing.assert_close(ours[keep], ref[keep], rtol=1e-6, atol=1e-6)
        assert torch.isneginf(ours[0, [0, 9, 2]]).all()  # min_tokens eos, bad word, 2-gram "1 2"


def test_mixed_batch_equals_each_row_alone():
    for seed in range(6):
        seqs = random_batch(seed, 12)
        logits = logits_for(12, seed)
        batched = process_logits(logits, seqs)
        for b, seq in enumerate(seqs):
            assert torch.equal(batched[b:b + 1], process_logits(logits[b:b + 1], [seq])), b
        out = decode_step(logits, seqs)
        for b, seq in enumerate(seqs):
            seq.mirostat_mu = None  # decode_step advanced it; replay from the same state
            alone = decode_step(logits[b:b + 1], [seq])
            assert alone.tokens.item() == out.tokens[b].item()


def test_greedy_rows_skip_temperature_and_truncation():
    logits = logits_for(1, 3)
    params = SamplingParams(temperature=0.0, top_k=2, typical_p=0.05, min_p=0.9)
    seq = SequenceState(params, [1], rng_seed=0)
    assert torch.equal(process_logits(logits, [seq]), logits)
    out = decode_step(logits, [seq])
    assert out.tokens.item() == int(logits.argmax())


def test_greedy_argmax_is_after_masks_and_penalties():
    logits = torch.tensor([[5.0, 4.0, 3.9, 0.0]])
    seq = SequenceState(SamplingParams(temperature=0.0, repetition_penalty=2.0), [0], [3],
                        rng_seed=0)
    # token 0 seen: 5 / 2 = 2.5 < 4 -> argmax is 1
    assert decode_step(logits, [seq]).tokens.item() == 1
    seq = SequenceState(SamplingParams(temperature=0.0, min_tokens=2), [2], [],
                        eos_token_ids=(0, 1), rng_seed=0)
    assert decode_step(logits, [seq]).tokens.item() == 2


def test_mirostat_hand_computed():
    probs = torch.tensor([0.5, 0.25, 0.15, 0.1])
    logits = probs.log()[None, :]
    tau, eta = 0.8, 0.5
    seq = SequenceState(SamplingParams(mirostat_tau=tau, mirostat_eta=eta, top_k=1), [1],
                        rng_seed=123)
    # mu starts at 2 * tau = 1.6: surprises are 0.69, 1.39, 1.90, 2.30 -> keep tokens 0 and 1
    # (top_k=1 is ignored: mirostat replaces the truncation samplers)
    kept = (~torch.isneginf(process_logits(logits, [seq])[0])).nonzero().flatten().tolist()
    assert kept == [0, 1]
    assert seq.mirostat_mu is None  # process_logits does not advance mirostat
    tok = decode_step(logits, [seq]).tokens.item()
    assert tok in (0, 1)
    renorm = {0: 2 / 3, 1: 1 / 3}[tok]  # surprise under the truncated, renormalised dist.
    expected_mu = 1.6 - eta * (-math.log(renorm) - tau)
    assert math.isclose(seq.mirostat_mu, expected_mu, rel_tol=1e-6)
    # next step uses the new threshold
    seq.append(tok)
    kept2 = (~torch.isneginf(process_logits(logits, [seq])[0])).nonzero().flatten().tolist()
    surprises = (-probs.log()).tolist()
    assert kept2 == [j for j, s in enumerate(surprises) if s <= expected_mu] or kept2 == [0]


def test_mirostat_threshold_below_every_surprise_keeps_argmax():
    logits = torch.tensor([[0.0, 0.0, 0.0, -1.0]])
    seq = SequenceState(SamplingParams(mirostat_tau=5.0), [1], mirostat_mu=0.1, rng_seed=0)
    out = process_logits(logits, [seq])
    assert (~torch.isneginf(out)).sum() == 3  # the three tied maxima stay


def test_mirostat_applies_temperature_first():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    seq = SequenceState(SamplingParams(mirostat_tau=0.6, temperature=0.5), [1], rng_seed=0)
    out = process_logits(logits, [seq])
    assert out[0, 0] == 4.0  # divided by the temperature, then truncated at mu = 1.2
    surprise = -torch.log_softmax(logits / 0.5, -1)[0]
    assert torch.equal(~torch.isneginf(out[0]), surprise <= 1.2)


def test_bad_rows_raise_numerical_error_for_that_row_only():
    seqs = random_batch(42, 6)
    seqs[1] = SequenceState(SamplingParams(temperature=0.0), [1], rng_seed=0)  # greedy bad row
    logits = logits_for(6, 1)
    clean = decode_step(logits[[0, 2, 4, 5]], [seqs[i] for i in (0, 2, 4, 5)])
    for seq in seqs:
        seq.mirostat_mu = None
    bad = logits.clone()
    bad[1, 3] = float("nan")
    bad[3, 7] = float("inf")
    bad[5, :] = NEG_INF
    out = decode_step(bad, seqs)
    assert set(out.errors) == {1, 3, 5}
    for row, err in out.errors.items():
        assert isinstance(err, NumericalError) and err.row == row
        assert out.tokens[row] == -1 and math.isnan(out.logprobs[row])
        assert out.top_logprobs[row] is None
    assert out.tokens[[0, 2, 4]].tolist() == clean.tokens[:3].tolist()
    torch.testing.assert_close(out.logprobs[[0, 2, 4]], clean.logprobs[:3], rtol=0, atol=0)
    assert torch.isnan(process_logits(bad, seqs)[[1, 3, 5]]).all()


def test_every_token_removed_is_an_error_not_token_zero():
    seqs = [SequenceState(SamplingParams(allowed_token_ids=(2,), ignore_eos=True), [1],
                          eos_token_ids=(2,), rng_seed=0),
            SequenceState(SamplingParams(temperature=0.0, allowed_token_ids=(2,),
                                         ignore_eos=True), [1], eos_token_ids=(2,), rng_seed=0),
            SequenceState(SamplingParams(), [1], rng_seed=0),
            SequenceState(SamplingParams(allowed_token_ids=(2,), ignore_eos=True, top_k=3,
                                         top_p=0.5, min_p=0.1, typical_p=0.5,
                                         epsilon_cutoff=0.1, eta_cutoff=0.1), [1],
                          eos_token_ids=(2,), rng_seed=0),
            SequenceState(SamplingParams(allowed_token_ids=(2,), ignore_eos=True,
                                         mirostat_tau=1.0), [1], eos_token_ids=(2,), rng_seed=0)]
    out = decode_step(logits_for(5, 2), seqs)
    assert set(out.errors) == {0, 1, 3, 4} and out.tokens[2] >= 0
    assert seqs[4].mirostat_mu is None


def test_overflow_after_temperature_is_an_error():
    logits = torch.zeros(2, V)
    logits[:, 5] = 1e36
    seqs = [SequenceState(SamplingParams(temperature=1e-4), [1], rng_seed=0),
            SequenceState(SamplingParams(temperature=1.0), [1], rng_seed=0)]
    out = decode_step(logits, seqs)
    assert set(out.errors) == {0} and out.tokens[1] == 5


def test_inputs_are_not_mutated_and_output_is_a_new_tensor():
    logits = logits_for(2, 4)
    before = logits.clone()
    seqs = random_batch(7, 2)
    process_logits(logits, seqs)
    decode_step(logits, seqs)
    assert torch.equal(logits, before)
    plain = [SequenceState(SamplingParams(), [1], rng_seed=0)] * 2
    out = process_logits(logits, plain)
    assert torch.equal(out, logits) and out.data_ptr() != logits.data_ptr()


def test_half_precision_logits_are_processed_in_float32():
    logits = logits_for(2, 5).to(torch.bfloat16)
    seqs = random_batch(3, 2)
    out = process_logits(logits, seqs)
    assert out.dtype == torch.float32
    assert decode_step(logits, seqs).logprobs.dtype == torch.float32


def test_probs_for_sampling():
    seqs = random_batch(9, 8)
    seqs[0] = SequenceState(SamplingParams(temperature=0.0), [1], rng_seed=0)
    logits = logits_for(8, 6)
    probs = probs_for_sampling(logits, seqs)
    torch.testing.assert_close(probs.sum(-1), torch.ones(8))
    assert probs[0].max() == 1.0 and probs[0].argmax() == logits[0].argmax()
    processed = process_logits(logits, seqs)
    for b, seq in enumerate(seqs):
        if seq.params.is_greedy:
            assert probs[b].max() == 1.0 and probs[b].argmax() == processed[b].argmax()
        else:
            torch.testing.assert_close(probs[b], torch.softmax(processed[b], -1))
            assert torch.equal(probs[b] > 0, ~torch.isneginf(processed[b]))


def test_shape_mismatch_is_rejected():
    seqs = random_batch(1, 2)
    for bad in (torch.zeros(3, V), torch.zeros(V), torch.zeros(2, V, dtype=torch.long)):
        try:
            decode_step(bad, seqs)
        except InvalidParameterError as err:
            assert err.param == "logits"
        else:
            raise AssertionError("expected InvalidParameterError")


def test_tiny_temperatures_give_valid_tokens_reliability_v3():
    # V3: 1e-8 is greedy (< 1e-5); 1e-4 and 0.009 are sampled but so peaked that the
    # argmax wins (next-best token has probability < exp(-gap / T) ~ 0 for these logits)
    logits = torch.tensor([[3.0, 2.5, -1.0, 0.0] + [-2.0] * 12]) * 10
    for t in (1e-8, 1e-4, 0.009):
        seqs = [SequenceState(SamplingParams(temperature=t, seed=s), [1]) for s in range(8)]
        out = decode_step(logits.expand(8, -1), seqs)
        assert not out.errors and out.tokens.tolist() == [0] * 8
        assert torch.isfinite(out.logprobs).all()


def test_argmax_rows_is_torch_argmax_with_ties_inf_and_nan():
    from metagen.decoding.processors import argmax_rows

    g = torch.Generator().manual_seed(0)
    x = torch.randint(-3, 4, (64, 1000), generator=g).float()  # many ties per row
    x[1] = float("-inf")
    x[2, 7] = float("inf")
    x[2, 9] = float("inf")
    x[3, 500] = float("nan")
    x[3, 600] = float("nan")
    x[4, :10] = float("-inf")
    for rows in (x, x[:1], x[::3], x[:, ::2]):  # contiguous, one row, strided rows/columns
        tokens, best = argmax_rows(rows)
        assert tokens.dtype == torch.int64 and torch.equal(tokens, rows.argmax(dim=-1))
        expect = rows.gather(1, tokens[:, None])[:, 0]
        assert torch.equal(best.isnan(), expect.isnan())
        assert torch.equal(best[~best.isnan()], expect[~expect.isnan()])


def test_ids_removed_by_id_equal_masking_them_first_and_never_touch_the_input():
    """End tokens (ignore_eos, min_tokens with stop ids) and bad words are set to -inf after the
    penalties and the temperature, in place on the pipeline's own copy: bit for bit masking them
    first, also on each row's maximum, with or without a stage that copies; the input unchanged."""
    from metagen.decoding.masks import mask_ids
    from metagen.decoding.penalties import apply_presence_frequency, apply_repetition_penalty
    from metagen.decoding.truncation import apply_temperature

    logits = logits_for(4, 9)
    top = logits.argmax(-1).tolist()
    for kw in ({}, {"temperature": 0.7}, {"temperature": 1.3, "repetition_penalty": 1.3,
                                          "presence_penalty": 0.5, "frequency_penalty": -0.4}):
        params = [SamplingParams(ignore_eos=True, **kw),
                  SamplingParams(min_tokens=5, stop_token_ids=[top[1]], **kw),
                  SamplingParams(**kw), SamplingParams(temperature=0.0, ignore_eos=True)]
        seqs = [SequenceState(p, [1, 2, top[b]], [3, 3], eos_token_ids=(top[0], 40),
                              bad_words_ids=((top[2],),) if b == 2 else (), rng_seed=b)
                for b, p in enumerate(params)]
        before = logits.clone()
        got = process_logits(logits, seqs)
        assert torch.equal(logits, before)
        want = mask_ids(logits, [[top[0], 40], [top[0], 40, top[1]], [top[2]], [top[0], 40]])
        col = lambda name, off: torch.tensor([getattr(p, name) for p in params[:3]] + [off])  # noqa: E731
        if "repetition_penalty" in kw:
            seen = torch.zeros(4, V, dtype=torch.bool)
            for b in range(4):
                seen[b, [1, 2, 3, top[b]]] = True
            counts = torch.zeros(4, V)
            counts[:, 3] = 2
            want = apply_repetition_penalty(want, seen, col("repetition_penalty", 1.0))
            want = apply_presence_frequency(want, counts, col("presence_penalty", 0.0),
                                            col("frequency_penalty", 0.0))
        if "temperature" in kw:
            want = apply_temperature(want, col("temperature", 1.0).float())
        assert torch.equal(got, want), kw
