"""Token dropping (attention sinks + recent window): validation, the pure block policy, and the
engine against an independent reference -- transformers' own forward with an explicit attention
mask that hides the dropped positions."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.kv_window import (first_recent_block, held_blocks, kept_blocks,
                                      longest_sequence, sink_blocks)
from metagen.engine.llm_engine import LLMEngine
from metagen.errors import InvalidParameterError
from metagen.testbed.modeling import model_path
from metagen.types import SamplingParams

BS, SINKS, WINDOW = 4, 4, 16  # 1 sink block, 4 window blocks: at most 6 blocks per sequence
PROMPT = [1, 400, 30, 20, 99, 5, 6]
LOGIT_ATOL = 2e-4  # float32 rounding of two implementations over 5 layers (logits are O(10))


# -- validation --------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, name", [
    (dict(kv_sink_tokens=-1, kv_window_tokens=16), "kv_sink_tokens"),
    (dict(kv_sink_tokens=True, kv_window_tokens=16), "kv_sink_tokens"),
    (dict(kv_sink_tokens=2.0, kv_window_tokens=16), "kv_sink_tokens"),
    (dict(kv_sink_tokens=4), "kv_sink_tokens"),  # sinks without a window
    (dict(kv_window_tokens=0), "kv_window_tokens"),
    (dict(kv_window_tokens=-16), "kv_window_tokens"),
    (dict(kv_window_tokens=24), "kv_window_tokens"),  # not a multiple of block_size 16
    (dict(kv_window_tokens=16.0), "kv_window_tokens"),
    (dict(kv_window_tokens="16"), "kv_window_tokens"),
    (dict(kv_window_tokens=16, prompt_lookup=3), "kv_window_tokens"),
    (dict(kv_window_tokens=16, speculative_model="/nonexistent"), "kv_window_tokens"),
])
def test_bad_window_settings_raise_naming_the_parameter(kwargs, name):
    with pytest.raises(InvalidParameterError, match=name):
        EngineConfig(**kwargs)


def test_a_given_speculator_with_a_window_raises(stories_path):
    from metagen.engine.models import load_model
    from metagen.engine.proposers import NgramProposer
    from metagen.engine.speculative_decoding import Speculator
    with pytest.raises(InvalidParameterError, match="speculator"):
        build_engine(load_model(stories_path), config=EngineConfig(kv_window_tokens=16),
                  speculator=Speculator(NgramProposer(max_ngram=3)))


def test_good_window_settings():
    EngineConfig(kv_window_tokens=32)  # window without sinks
    EngineConfig(block_size=4, kv_sink_tokens=1, kv_window_tokens=4)
    assert EngineConfig().kv_window_tokens is None and EngineConfig().kv_sink_tokens == 0


# -- the pure policy ---------------------------------------------------------------------------

def test_kept_blocks_golden():
    assert kept_blocks(0, 4, 4, 8) == []
    assert kept_blocks(13, 4, 4, 8) == [0, 1, 2, 3]  # nothing to drop yet
    assert kept_blocks(17, 4, 4, 8) == [0, 2, 3, 4]  # block 1 dropped
    assert kept_blocks(40, 4, 5, 8) == [0, 1, 7, 8, 9]  # 5 sink tokens: two sink blocks
    assert kept_blocks(40, 4, 0, 8) == [7, 8, 9]  # no sinks
    assert kept_blocks(40, 4, 0, None) == list(range(10))
    assert sink_blocks(4, 0) == 0 and sink_blocks(4, 1) == 1 and sink_blocks(4, 8) == 2
    assert first_recent_block(40, 4, 4, 8) == 7 and first_recent_block(40, 4, 4, None) == 1


@pytest.mark.parametrize("bs, sinks, window", [(4, 4, 16), (4, 0, 4), (16, 5, 32), (1, 3, 2)])
def test_kept_blocks_invariants(bs, sinks, window):
    prev_first = 0
    for n in range(1, 300):
        kept = kept_blocks(n, bs, sinks, window)
        last = (n - 1) // bs
        assert kept == sorted(set(kept)) and kept[-1] == last  # the block being written
        assert len(kept) <= sink_blocks(bs, sinks) + window // bs + 1
        visible = {p for p in range(n) if p // bs in kept}
        assert set(range(min(n, sinks))) <= visible  # the sinks
        assert set(range(max(0, n - 1 - window), n)) <= visible  # at least `window` recent
        first = first_recent_block(n, bs, sinks, window)
        assert first >= prev_first  # the dropped run only grows
        prev_first = first


# -- the engine against transformers with an explicit mask --------------------------------------

def _reference_logits(path, tokens, steps, bs=BS, sinks=SINKS, window=WINDOW):
    """Logits (len(tokens), V) of transformers' forward where a token computed in a step that
    starts at position c sees (causally) the first ``ceil(sinks / bs)`` blocks, the
    ``window / bs`` whole blocks before the block of c, and everything from that block on -- the
    documented contract, restated independently of the engine's code."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    t = len(tokens)
    k = torch.arange(t)
    mask = torch.zeros(t, t, dtype=torch.bool)
    sink_end = -(-sinks // bs) * bs
    for start, end in steps:
        recent_from = (start // bs - window // bs) * bs
        for q in range(start, end):
            mask[q] = (k <= q) & ((k < sink_end) | (k >= recent_from))
    with torch.no_grad():
        return model(torch.tensor([tokens]), attention_mask=mask[None, None]).logits[0]


def _decode_steps(prompt_len, total, cached=0):
    """The engine's steps for a prompt prefilled in one chunk after ``cached`` prefix-cache
    tokens, then one token per step."""
    head = [(0, cached)] if cached else []
    return head + [(cached, prompt_len)] + [(p, p + 1) for p in range(prompt_len, total)]


def _engine(path, runner_path="native", **options):
    options = dict(block_size=BS, num_blocks=256, kv_sink_tokens=SINKS, kv_window_tokens=WINDOW,
                   hydragen_min_prefix=0) | options
    engine = LLMEngine.from_pretrained(path, tokenizer=False, **options)
    if runner_path == "torch":  # every row through the PyTorch metadata path
        engine.runner.native = None
    elif runner_path == "native-attention" and engine.runner.native is not None:
        engine.runner.native.max_tokens = 0  # products in PyTorch, attention natively
    return engine


def _record_logits(engine):
    seen: list[torch.Tensor] = []

    def hook(logits, states):
        seen.append(logits.clone())
        return logits

    engine.logits_hook = hook
    return seen


GREEDY = SamplingParams(temperature=0.0, max_tokens=90, ignore_eos=True)


def test_window_larger_than_the_generation_equals_the_full_cache(stories_path):
    full = _engine(stories_path, kv_sink_tokens=0, kv_window_tokens=None)
    wide = _engine(stories_path, kv_window_tokens=128)  # > prompt + 90 tokens
    a, b = (e.generate([PROMPT], GREEDY)[0].outputs[0] for e in (full, wide))
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs


@pytest.mark.parametrize("runner_path", ["native", "native-attention", "torch"])
def test_every_step_equals_masked_reference(stories_path, runner_path):
    engine = _engine(stories_path, runner_path)
    seen = _record_logits(engine)
    out = engine.generate([PROMPT], GREEDY)[0].outputs[0]
    tokens = PROMPT + list(out.token_ids)
    assert len(tokens) // BS > sink_blocks(BS, SINKS) + WINDOW // BS + 1 + 10  # really dropping
    ref = _reference_logits(stories_path, tokens, _decode_steps(len(PROMPT), len(tokens)))
    got = torch.cat(seen)  # (90, V): the logits of the last prompt token, then of each output
    want = ref[len(PROMPT) - 1:len(tokens) - 1]
    assert (got - want).abs().max() < LOGIT_ATOL
    # and the window changed the model's view: the full-context logits differ
    full = _reference_logits(stories_path, tokens, [(0, len(tokens))])
    assert (full[len(PROMPT) - 1:-1] - want).abs().max() > 100 * LOGIT_ATOL
    engine.check_integrity()


def test_memory_is_bounded_per_sequence(stories_path):
    engine = _engine(stories_path, prefix_cache=False)
    bound = sink_blocks(BS, SINKS) + WINDOW // BS + 1
    engine.add_request(PROMPT, SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=200,
                                              ignore_eos=True))
    peak = 0
    while engine.has_unfinished():
        engine.step()
        for seq in engine.scheduler.running:
            assert len(seq.block_table) <= bound
        peak = max(peak, engine.blocks.num_used)
        engine.check_integrity()
    assert peak <= 3 * bound  # against 3 * 52 blocks with the full cache
    assert engine.blocks.num_used == 0


@pytest.mark.parametrize("runner_path", ["native", "torch"])
def test_forked_samples_each_follow_the_masked_reference(stories_path, runner_path):
    engine = _engine(stories_path, runner_path)
    params = SamplingParams(temperature=1.0, seed=7, n=3, max_tokens=60, ignore_eos=True,
                            logprobs=0)
    outs = engine.generate([PROMPT], params)[0].outputs
    assert len({o.token_ids for o in outs}) == 3
    for o in outs:
        tokens = PROMPT + list(o.token_ids)
        ref = _reference_logits(stories_path, tokens, _decode_steps(len(PROMPT), len(tokens)))
        lp = torch.log_softmax(ref[len(PROMPT) - 1:-1], -1)
        want = lp.gather(1, torch.tensor(o.token_ids)[:, None])[:, 0]
        assert (torch.tensor(o.logprobs) - want).abs().max() < LOGIT_ATOL
    assert engine.runner.hydragen_rows > 0  # the samples attended their shared sinks together
    engine.check_integrity()


def test_prefix_cache_never_offers_dropped_or_windowed_blocks(stories_path):
    engine = _engine(stories_path)
    first = engine.generate([PROMPT], GREEDY)[0].outputs[0]
    tokens = PROMPT + list(first.token_ids)
    match = engine.radix.match(tokens)  # type: ignore[union-attr]
    assert len(match.blocks) <= max(len(PROMPT) // BS, sink_blocks(BS, SINKS))
    # a continuation of the whole sequence starts from what was cached, and is still exact
    prompt2 = tokens[:60]
    seen = _record_logits(engine)
    second = engine.generate([prompt2], GREEDY)[0]
    cached = second.num_cached_tokens
    assert 0 < cached <= len(match.blocks) * BS
    tokens2 = prompt2 + list(second.outputs[0].token_ids)
    ref = _reference_logits(stories_path, tokens2, _decode_steps(len(prompt2), len(tokens2),
                                                                 cached))
    assert (torch.cat(seen) - ref[len(prompt2) - 1:-1]).abs().max() < LOGIT_ATOL
    engine.check_integrity()


def test_truncate_past_the_window_raises_and_changes_nothing(stories_path):
    engine = _engine(stories_path, prefix_cache=False)
    rid = engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=80,
                                                    ignore_eos=True))
    for _ in range(60):
        engine.step()
    seq = engine.requests[rid].seqs[0]
    before = (list(seq.token_ids), list(seq.block_table), seq.dropped_blocks)
    with pytest.raises(InvalidParameterError, match="num_tokens"):
        engine.truncate(seq.seq_id, len(PROMPT) + 1)
    assert (list(seq.token_ids), list(seq.block_table), seq.dropped_blocks) == before
    engine.truncate(seq.seq_id, len(seq.token_ids) - 2)  # within the window: fine
    engine.run_until_done([rid])
    engine.check_integrity()


# -- sequences longer than the cache -----------------------------------------------------------

@pytest.mark.parametrize("bs, sinks, window", [(4, 4, 16), (16, 16, 64), (16, 0, 16), (1, 3, 2)])
@pytest.mark.parametrize("step", [1, 5, 16, 64])
def test_held_blocks_bounds_every_step(bs, sinks, window, step):
    """Every step (c tokens computed, n <= step new ones) holds the blocks kept for token c plus
    those it writes: never more than held_blocks of the sequence's final length."""
    for total in range(1, 200):
        bound = held_blocks(total, bs, sinks, window, step)
        worst = 0
        for c in range(total):
            n = min(step, total - c)
            kept = set(kept_blocks(c + 1, bs, sinks, window))
            worst = max(worst, len(kept | set(range(c // bs, (c + n - 1) // bs + 1))))
        assert worst <= bound
        assert bound <= -(-total // bs)
    assert held_blocks(600, 16, 16, None, 64) == 38  # no window: the whole sequence
    assert held_blocks(600, 16, 16, 64, 1) == 6 and held_blocks(600, 16, 16, 64, 64) == 10
    assert held_blocks(600, 16, 16, 64, 2048) == 38  # one 600-token recompute chunk


@pytest.mark.parametrize("window, step", [(None, 64), (64, 1), (64, 64), (64, 2048), (16, 200)])
def test_longest_sequence_is_the_longest_that_fits(window, step):
    for num_blocks in range(1, 40):
        got = longest_sequence(1000, num_blocks, 16, 16, window, step)
        fits = [n for n in range(1, 1001) if held_blocks(n, 16, 16, window, step) <= num_blocks]
        assert fits == list(range(1, got + 1))


LONG = dict(block_size=16, num_blocks=12, kv_sink_tokens=16, kv_window_tokens=64,
            max_num_batched_tokens=64, prefix_cache=False)  # 12 blocks of 16 = 192 tokens


@pytest.mark.parametrize("runner_path", ["native", "torch"])
def test_a_small_cache_generates_past_its_size_and_equals_masked_reference(runner_path):
    """600 tokens after a 150-token prompt (longer than the window, prefilled in chunks of 64)
    on a cache of 192 tokens: every step's logits equal the masked reference, and the pool never
    holds more than sinks + window + 1 + one chunk's blocks."""
    path = model_path("policy")  # max_position_embeddings 1024 (stories260K has 512)
    engine = _engine(path, runner_path, **LONG)
    assert engine.max_model_len == 1024 and engine.model.max_positions == 1024
    bound = held_blocks(750, 16, 16, 64, 64)
    assert bound == 10
    prompt = torch.randint(3, engine.vocab_size, (150,),
                           generator=torch.Generator().manual_seed(0)).tolist()
    seen = _record_logits(engine)
    rid = engine.add_request(prompt, SamplingParams(temperature=0.0, max_tokens=600,
                                                    ignore_eos=True))
    done = []
    while engine.has_unfinished():
        done += engine.step()
        assert engine.blocks.num_used <= bound
        engine.check_integrity()
    assert engine.blocks.num_used == 0 and [o.request_id for o in done] == [rid]
    tokens = prompt + list(done[0].outputs[0].token_ids)
    assert len(tokens) == 750
    steps = [(0, 64), (64, 128), (128, 150)] + [(p, p + 1) for p in range(150, 749)]
    ref = _reference_logits(path, tokens, steps, bs=16, sinks=16, window=64)
    got = torch.cat(seen)  # (600, V): the last prompt token's logits, then each output's
    assert (got - ref[149:749]).abs().max() < LOGIT_ATOL
    assert (got[192 - 149:] - ref[192:749]).abs().max() < LOGIT_ATOL  # past the cache's size
    full = _reference_logits(path, tokens, [(0, 750)], bs=16, sinks=16, window=64)
    assert (full[149:749] - ref[149:749]).abs().max() > 100 * LOGIT_ATOL  # the window mattered


@pytest.mark.parametrize("changes", [
    dict(kv_sink_tokens=0, kv_window_tokens=None),  # no window: the whole sequence must fit
    dict(max_num_batched_tokens=2048),  # a recompute chunk of up to 600 tokens cannot fit
])
def test_a_request_whose_held_blocks_cannot_fit_is_refused_at_request_time(changes):
    engine = _engine(model_path("policy"), **(LONG | changes))
    assert engine.max_model_len == 192
    with pytest.raises(InvalidParameterError, match="max_tokens"):
        engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=600))
    assert not engine.has_unfinished()
    engine.add_request(PROMPT, SamplingParams(temperature=0.0, max_tokens=185))  # fits whole


def test_rope_tables_stay_bounded_by_the_model():
    from metagen.engine.models.config import ModelConfig
    model = ModelConfig.from_folder(model_path("policy"))
    long = EngineConfig(**(LONG | dict(max_model_len=10**9)))
    assert long.max_positions(model) == 1024  # the model's max_position_embeddings
    assert EngineConfig(**(LONG | dict(max_num_batched_tokens=2048))).max_positions(model) == 192


def test_sequences_longer_than_the_cache_survive_preemption():
    """Three 300-token requests on the 12-block cache: their windows (6 blocks each while
    decoding) do not fit together, so sequences are preempted and recomputed in chunks of 64,
    each holding at most 10 blocks; all of them finish."""
    engine = _engine(model_path("policy"), **LONG)
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=300, ignore_eos=True)
    rids = [engine.add_request(PROMPT, params) for _ in range(3)]
    done = []
    while engine.has_unfinished():
        done += engine.step()
        for seq in engine.scheduler.running:
            assert len(seq.block_table) <= held_blocks(307, 16, 16, 64, 64)
        engine.check_integrity()
    assert engine.scheduler.num_preemptions > 0
    assert sorted(o.request_id for o in done) == sorted(rids)
    assert all(len(o.outputs[0].token_ids) == 300 for o in done)
    assert engine.blocks.num_used == 0
