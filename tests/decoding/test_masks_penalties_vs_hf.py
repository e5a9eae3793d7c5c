"""Constraints and penalties: against transformers' processors where it has one, else by hand."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.generation.logits_process import (
    MinNewTokensLengthLogitsProcessor, NoBadWordsLogitsProcessor, NoRepeatNGramLogitsProcessor,
    RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor,
)

from metagen.decoding import (
    SequenceState, apply_presence_frequency, apply_repetition_penalty, banned_by_bad_words,
    banned_by_ngram, process_logits, rows_to_mask, token_counts,
)
from metagen.types import SamplingParams

V = 32
NEG_INF = float("-inf")


def logits_for(rows: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, V, generator=torch.Generator().manual_seed(seed)) * 3


def state(prompt, output=(), **params) -> SequenceState:
    return SequenceState(SamplingParams(**params), list(prompt), list(output), rng_seed=0)


def test_repetition_penalty_matches_transformers_per_row():
    contexts = [[1, 2, 3, 3, 7], [5, 9, 9, 31, 0], [4, 4, 4, 4, 4]]
    penalties = [1.3, 0.7, 1.0]
    logits = logits_for(3, 0)
    ours = apply_repetition_penalty(logits, rows_to_mask(contexts, V), torch.tensor(penalties))
    for b, (ctx, pen) in enumerate(zip(contexts, penalties)):
        if pen == 1.0:
            assert torch.equal(ours[b], logits[b])
            continue
        ref = RepetitionPenaltyLogitsProcessor(pen)(torch.tensor([ctx]), logits[b:b + 1].clone())
        assert torch.equal(ours[b:b + 1], ref)


def test_repetition_penalty_covers_prompt_and_output_in_pipeline():
    prompt, output = [3, 4, 5], [6, 6, 8]
    logits = logits_for(1, 1)
    ours = process_logits(logits, [state(prompt, output, repetition_penalty=1.5)])
    ref = RepetitionPenaltyLogitsProcessor(1.5)(torch.tensor([prompt + output]), logits.clone())
    assert torch.equal(ours, ref)


def test_presence_frequency_hand_computed():
    logits = torch.zeros(2, 6)
    logits[0] = torch.tensor([1.0, -1.0, 2.0, 0.5, 0.0, 3.0])
    counts = token_counts([[2, 2, 2, 5], [1]], 6)
    out = apply_presence_frequency(logits, counts, torch.tensor([0.5, -1.0]),
                                   torch.tensor([0.25, 2.0]))
    # row 0: token 2 seen 3x -> 2 - (0.25*3 + 0.5) = 0.75; token 5 once -> 3 - 0.75 = 2.25
    assert out[0].tolist() == [1.0, -1.0, 0.75, 0.5, 0.0, 2.25]
    # row 1: token 1 once -> 0 - (2*1 - 1) = -1
    assert out[1].tolist() == [0.0, -1.0, 0.0, 0.0, 0.0, 0.0]


def test_presence_frequency_only_count_output_tokens():
    logits = logits_for(1, 2)
    seq = state([7, 7, 7], [9], presence_penalty=1.0, frequency_penalty=0.5)
    out = process_logits(logits, [seq])
    expected = logits.clone()
    expected[0, 9] -= 1.5
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=0, max_size=14), st.integers(1, 4))
def test_no_repeat_ngram_matches_transformers(tokens, n):
    logits = logits_for(1, 3)[:, :6].contiguous()
    banned = banned_by_ngram(tokens, n)
    ours = logits.masked_fill(rows_to_mask([banned], 6), NEG_INF)
    if tokens:
        ref = NoRepeatNGramLogitsProcessor(n)(torch.tensor([tokens]), logits.clone())
    else:
        ref = logits
    assert torch.equal(ours, ref)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=10),
       st.lists(st.lists(st.integers(0, 5), min_size=1, max_size=3), min_size=1, max_size=4))
def test_bad_words_match_transformers(tokens, bad_words):
    logits = logits_for(1, 4)[:, :6].contiguous()
    banned = banned_by_bad_words(tokens, bad_words)
    ours = logits.masked_fill(rows_to_mask([banned], 6), NEG_INF)
    ref = NoBadWordsLogitsProcessor(bad_words)(torch.tensor([tokens]), logits.clone())
    assert torch.equal(ours, ref)


def test_pipeline_no_repeat_and_bad_words_use_prompt_plus_output():
    prompt, output = [1, 2, 3, 1], [2, 9]
    logits = logits_for(1, 5)
    seq = state(prompt, output, no_repeat_ngram_size=2)
    seq.bad_words_ids = ((2, 9, 4), (17,))
    ours = process_logits(logits, [seq])
    ids = torch.tensor([prompt + output])
    ref = NoRepeatNGramLogitsProcessor(2)(ids, logits.clone())
    ref = NoBadWordsLogitsProcessor([[2, 9, 4], [17]])(ids, ref)
    assert torch.equal(ours, ref)
    assert torch.isneginf(ours[0, [4, 17]]).all()


def test_min_tokens_matches_transformers_and_also_suppresses_stop_tokens():
    eos = (2, 5)
    logits = logits_for(1, 6)
    for n_out in range(5):
        output = [7] * n_out
        seq = SequenceState(SamplingParams(min_tokens=3, stop_token_ids=(11,)), [1, 1], output,
                            eos_token_ids=eos, rng_seed=0)
        ours = process_logits(logits, [seq])
        ids = torch.tensor([[1, 1] + output])
        ref = MinNewTokensLengthLogitsProcessor(2, 3, list(eos))(ids, logits.clone())
        assert torch.equal(ours[:, [t for t in range(V) if t != 11]],
                           ref[:, [t for t in range(V) if t != 11]])
        assert bool(torch.isneginf(ours[0, 11])) == (n_out < 3)


def test_ignore_eos_always_suppresses_eos_only():
    logits = logits_for(1, 7)
    seq = SequenceState(SamplingParams(ignore_eos=True, stop_token_ids=(11,)), [1], [4] * 50,
                        eos_token_ids=(2,), rng_seed=0)
    out = process_logits(logits, [seq])
    assert torch.isneginf(out[0, 2]) and torch.isfinite(out[0, 11])
    assert torch.isneginf(out).sum() == 1


def test_logit_bias_matches_sequence_bias_of_single_tokens():
    logits = logits_for(1, 8)
    bias = {3: 5.0, 10: -100.0, 20: 0.25}
    out = process_logits(logits, [state([1], logit_bias=bias)])
    ref = SequenceBiasLogitsProcessor([[[k], v] for k, v in bias.items()])(
        torch.tensor([[1]]), logits.clone())
    assert torch.equal(out, ref)


def test_logit_bias_is_clamped_by_params_and_out_of_vocab_ids_ignored():
    logits = torch.zeros(1, V)
    out = process_logits(logits, [state([1], logit_bias={0: 1e9, V + 5: 3.0})])
    assert out[0, 0] == 100.0 and (out[0, 1:] == 0).all()


def test_allowed_token_ids_remove_everything_else_per_row():
    logits = logits_for(2, 9)
    seqs = [state([1], allowed_token_ids=(3, 4, 30)), state([1])]
    out = process_logits(logits, seqs)
    kept = (~torch.isneginf(out[0])).nonzero().flatten().tolist()
    assert kept == [3, 4, 30]
    assert torch.equal(out[0, kept], logits[0, kept])
    assert torch.equal(out[1], logits[1])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.none() | st.lists(st.integers(-3, V + 3), max_size=6), min_size=1,
                max_size=5))
def test_sparse_id_masking_equals_the_dense_mask(rows):
    from metagen.decoding import mask_ids, mask_tokens

    logits = logits_for(len(rows), 3)
    got = mask_ids(logits, rows)
    assert torch.equal(got, mask_tokens(logits, rows_to_mask(rows, V)))
    assert got is not logits and torch.isfinite(logits).all()  # the input is left alone
