"""Kept partial blocks (TailCache, inside the radix prefix cache): reference counts, lookup,
LRU bound and eviction by hand; then in the engine: a continuation of a finished sequence (a
search's next step) prefills only what no sequence computed, with the same tokens and
log-probs as an engine without any prefix cache, and memory pressure still frees everything."""

from __future__ import annotations

import pytest

from metagen.engine.build import build_engine
from metagen.engine.block_manager import BlockManager
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models import load_model
from metagen.engine.radix_cache import RadixCache
from metagen.engine.tail_cache import TailCache
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

BS = 4


def test_put_take_counts_references_and_prefers_the_longest_tail() -> None:
    bm = BlockManager(8, BS)
    tc = TailCache(bm, max_entries=4)
    seq = [1, 2, 3, 4, 5, 6, 7]  # one whole block, then 3 tokens
    table = bm.allocate(2)
    assert tc.put(seq, 6, table)  # 6 computed: tail (5, 6) in table[1]
    assert tc.put(seq, 7, table)  # 7 computed: tail (5, 6, 7), the same block
    assert not tc.put(seq, 7, table)  # kept already
    assert not tc.put(seq, 4, table)  # ends on a block boundary: nothing partial
    assert bm.refcount(table[1]) == 3 and len(tc) == 2
    assert tc.take([1, 2, 3, 4, 5, 6, 7, 8], 1, limit=7) == (table[1], 3)
    assert tc.take([1, 2, 3, 4, 5, 6, 7, 8], 1, limit=6) == (table[1], 2)  # room for 2 only
    assert bm.refcount(table[1]) == 5  # each take gave the caller a reference
    assert tc.take([1, 2, 3, 4, 5, 9, 9], 1, limit=6) is None  # other tokens after the prefix
    assert tc.take([0, 2, 3, 4, 5, 6, 7], 1, limit=6) is None  # another prefix
    assert tc.take([1, 2, 3, 4, 5, 6, 7], 0, limit=6) is None  # no tail right after the root
    bm.free([table[1], table[1]])
    bm.free(table)
    assert tc.evict(8) == 1  # the last two references were the cache's: one block freed
    assert len(tc) == 0 and bm.num_free == 8
    with pytest.raises(InvalidParameterError, match="max_entries"):
        TailCache(bm, max_entries=-1)


def test_lru_bound_and_a_shared_tail_leaves_without_freeing() -> None:
    bm = BlockManager(8, BS)
    tc = TailCache(bm, max_entries=2)
    tables = [bm.allocate(1) for _ in range(3)]
    for i, t in enumerate(tables):
        tc.put([10 + i, 1], 2, t)
    assert len(tc) == 2 and bm.refcount(tables[0][0]) == 1  # the oldest left
    assert tc.take([10, 1, 5], 0, 2) is None and tc.take([11, 1, 5], 0, 2) is not None
    bm.free(tables[0] + tables[1] + tables[2])  # 11's tail still shared by the taker
    assert tc.evict(1) == 1  # 12's (least recently used) freed its block
    assert tc.evict(1) == 0 and len(tc) == 0  # 11's is still held by its taker
    assert bm.num_free == 7


def test_radix_cache_lists_evicts_and_resets_its_tails() -> None:
    bm = BlockManager(8, BS)
    rc = RadixCache(bm)
    table = bm.allocate(2)
    seq = [1, 2, 3, 4, 5, 6]
    rc.insert(seq, table[:1])
    rc.tails.put(seq, 6, table)
    bm.free(table)
    assert sorted(rc.cached_blocks()) == sorted(table) and rc.num_cached_blocks == 2
    assert rc.evictable_blocks == 2
    rc.check_integrity()
    assert rc.evict(1) == 1 and len(rc.tails) == 0 and rc.num_cached_blocks == 1  # tail first
    rc.tails.put(seq, 6, table[:1] + bm.allocate(1))
    bm.free([rc.tails.blocks()[0]])
    rc.reset()
    assert bm.num_free == 8 and rc.num_cached_blocks == 0


@pytest.fixture(scope="module")
def qwen3(random_model_dir):
    return load_model(random_model_dir("qwen3"))


def _engine(model, **options) -> LLMEngine:
    return build_engine(model, None, EngineConfig(device="cpu", block_size=8, **options))


def _tokens_and_logprobs(outs):
    return [[(list(c.token_ids), c.logprobs) for c in o.outputs] for o in outs]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_search_steps_prefill_only_new_tokens_and_equal_no_cache(qwen3, temperature) -> None:
    """Three steps of a search: each request continues a finished one. With kept tails a step
    prefills one token per request (the last sampled one, never computed); outputs equal an
    engine without any prefix cache (greedy and seeded samples)."""
    prompts = [[1] + [5 + i] * 12 for i in range(3)]  # 13 tokens: one block + 5
    on, off = _engine(qwen3), _engine(qwen3, prefix_cache=False)
    ctx_on, ctx_off = [list(p) for p in prompts], [list(p) for p in prompts]
    for step in range(3):
        params = SamplingParams(temperature=temperature, max_tokens=6, ignore_eos=True,
                                seed=step, n=1 if temperature == 0 else 2)
        before = on.counters.snapshot()
        a, b = on.generate(ctx_on, params), off.generate(ctx_off, params)
        got, ref = _tokens_and_logprobs(a), _tokens_and_logprobs(b)
        assert [[t for t, _ in r] for r in got] == [[t for t, _ in r] for r in ref]
        for r_got, r_ref in zip(got, ref):
            for (_, lp_got), (_, lp_ref) in zip(r_got, r_ref):
                assert max(abs(x - y) for x, y in zip(lp_got, lp_ref)) < FLOAT_LOGPROB_TOL
        prefilled = (on.counters.prompt_tokens - before.prompt_tokens
                     - (on.counters.cached_prompt_tokens - before.cached_prompt_tokens))
        if step:  # every context but its last token was computed by the previous step
            assert prefilled == len(ctx_on)
        ctx_on = [c + list(o.outputs[0].token_ids) for c, o in zip(ctx_on, a)]
        ctx_off = [c + list(o.outputs[0].token_ids) for c, o in zip(ctx_off, b)]
        on.check_integrity()
    assert len(on.radix.tails) > 0
    on.radix.evict(on.blocks.num_blocks)
    assert on.blocks.num_free == on.blocks.num_blocks  # nothing leaked


def test_tails_under_memory_pressure_are_evicted_first(qwen3) -> None:
    """A cache too small for kept tails plus running sequences: tails leave, nothing fails,
    and greedy outputs equal a roomy engine's."""
    tight = _engine(qwen3, num_blocks=12, max_num_seqs=4)
    roomy = _engine(qwen3)
    params = SamplingParams(temperature=0.0, max_tokens=11, ignore_eos=True)
    ctx = [[1, 3 + i, 4, 5] for i in range(8)]
    for _ in range(3):
        a, b = tight.generate(ctx, params), roomy.generate(ctx, params)
        assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]
        tight.check_integrity()
        ctx = [c + list(o.outputs[0].token_ids) for c, o in zip(ctx, a)]
    assert len(tight.radix.tails) <= tight.blocks.num_blocks // 4
    tight.radix.evict(tight.blocks.num_blocks)
    assert tight.blocks.num_free == tight.blocks.num_blocks
