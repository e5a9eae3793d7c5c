"""score()/score_sequences() fail per item (bad input and NaN logits applied to scoring): one bad
item among good ones fails alone, the good ones score as in a run without it (to the float32
rounding the engine states for any change of batch composition: ``BATCH_RTOL``), the engine keeps
serving and holds no block afterwards."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import BATCH_RTOL
from metagen.engine.models import load_model
from metagen.errors import InvalidParameterError, InvalidPromptError, NumericalError
from metagen.types import SamplingParams

VOCAB = 96
NAN_TOKEN = 90  # the scripted-fault model's embedding of this token is NaN
GREEDY = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module")
def llama(random_model_dir):
    return load_model(random_model_dir("llama"))


@pytest.fixture(scope="module")
def nan_llama(random_model_dir):
    """Scripted fault on a real model: one token's embedding is NaN, so any sequence holding it
    has NaN hidden states from that position on."""
    model = load_model(random_model_dir("llama"))
    model.embed[NAN_TOKEN] = float("nan")
    return model


def _engine(model):
    return build_engine(model, None, EngineConfig(device="cpu", block_size=8))


def _same_scores(got, reference):
    """Equal to the engine's batch-composition guarantee: floats within BATCH_RTOL."""
    assert all(isinstance(v, float) for v in got)
    return got == pytest.approx(reference, rel=BATCH_RTOL, abs=0)


def _good_items(n=16, seed=0):
    """``n`` (ids, k) items without NAN_TOKEN; every 4 share a 20-token prompt (so the shared
    head is prefilled once and cached, the path a bad item must not disturb)."""
    g = torch.Generator().manual_seed(seed)
    heads = [[1] + torch.randint(3, 80, (19,), generator=g).tolist() for _ in range(n // 4)]
    items = []
    for i in range(n):
        tail = torch.randint(3, 80, (int(torch.randint(1, 9, (1,), generator=g)),),
                             generator=g).tolist()
        items.append((heads[i // 4] + tail, 20))
    return items


def _all_blocks_free(engine):
    engine.check_integrity()
    engine.radix.evict(engine.blocks.num_blocks)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def _bad_item(kind, engine):
    return {
        "out_of_vocab": ([1, 5, VOCAB, 7], 2),
        "negative_id": ([1, -1, 7], 1),
        "too_long": ([1] + [5] * engine.max_model_len, 3),
        "k_zero": ([1, 5, 7], 0),
        "k_past_end": ([1, 5, 7], 4),
        "k_bool": ([1, 5, 7], True),
        "empty": ([], 1),
        "not_a_pair": ([1, 5, 7],),
    }[kind]


BAD_KINDS = ["out_of_vocab", "negative_id", "too_long", "k_zero", "k_past_end", "k_bool",
             "empty", "not_a_pair"]


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_one_invalid_item_among_16_fails_alone(llama, kind):
    good = _good_items()
    reference = _engine(llama).score_sequences(good)
    engine = _engine(llama)
    before = engine.generate([[1, 4, 9, 16]], GREEDY)[0].outputs[0].token_ids
    items = good[:5] + [_bad_item(kind, engine)] + good[5:]
    got = engine.score_sequences(items, errors="return")
    assert isinstance(got[5], InvalidPromptError)
    assert _same_scores(got[:5] + got[6:], reference)
    assert engine.generate([[1, 4, 9, 16]], GREEDY)[0].outputs[0].token_ids == before
    _all_blocks_free(engine)


@pytest.mark.parametrize("kind", ["out_of_vocab", "too_long", "k_zero"])
def test_raise_mode_raises_before_any_work(llama, kind):
    engine = _engine(llama)
    items = _good_items()[:3] + [_bad_item(kind, engine)]
    with pytest.raises(InvalidPromptError):
        engine.score_sequences(items)  # errors="raise" is the default: today's behaviour
    assert engine.counters.requests == 0 and engine.counters.computed_tokens == 0
    assert engine.blocks.num_free == engine.blocks.num_blocks


@pytest.mark.parametrize("where", ["continuation", "prompt"])
def test_scripted_nan_embedding_item_is_a_numerical_error_and_others_unaffected(nan_llama,
                                                                                where):
    good = _good_items(seed=1)
    reference = _engine(nan_llama).score_sequences(good)
    assert all(isinstance(v, float) for v in reference)
    engine = _engine(nan_llama)
    before = engine.generate([[1, 4, 9, 16]], GREEDY)[0].outputs[0].token_ids
    # NaN after k: the scored tokens turn NaN; NaN before k: every scored token is NaN
    bad = ([1] + [5] * 12 + [NAN_TOKEN] + [6] * 12, 4) if where == "continuation" else \
        ([1, 5, NAN_TOKEN] + [6] * 12, 9)
    got = engine.score_sequences(good[:9] + [bad] + good[9:], errors="return")
    assert isinstance(got[9], NumericalError) and got[9].row == 9
    assert _same_scores(got[:9] + got[10:], reference)
    # the NaN sequence stopped at its first NaN log-probability and was not cached
    assert engine.radix.match(bad[0]).num_tokens == 0
    assert engine.generate([[1, 4, 9, 16]], GREEDY)[0].outputs[0].token_ids == before
    with pytest.raises(NumericalError):
        engine.score_sequences([bad] + good[:2])
    assert _same_scores(engine.score_sequences(good), reference)  # now from the cache too
    _all_blocks_free(engine)


def test_score_returns_errors_per_pair_and_keeps_shape(llama):
    prompts = [[1, 10, 11, 12], [1, 13, VOCAB + 5], [1, 14], "not ids"]
    conts = [[[5, 6], [7]], [[8], [9, 9]], [[], [VOCAB]], [[1]]]
    engine = _engine(llama)
    got = engine.score(prompts, conts, errors="return")
    assert [len(r) for r in got] == [2, 2, 2, 1]
    ref = _engine(llama).score(prompts[:1] + prompts[2:3], [conts[0], [[]]])
    assert _same_scores(got[0], ref[0]) and got[2][0] == 0.0
    assert all(isinstance(e, InvalidPromptError) for e in got[1] + [got[2][1], got[3][0]])
    with pytest.raises(InvalidPromptError):
        engine.score(prompts, conts)
    with pytest.raises(InvalidPromptError, match="one list per prompt"):
        engine.score(prompts, conts[:2], errors="return")
    with pytest.raises(InvalidParameterError, match="errors"):
        engine.score_sequences([([1, 2], 1)], errors="ignore")
    _all_blocks_free(engine)
