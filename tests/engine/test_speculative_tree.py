"""Draft trees in the engine (``EngineConfig.speculative_tree``): greedy output is plain
greedy's (tokens equal, logprobs within float32 rounding), leaves are really accepted, the
accepted leaf's K/V is moved to its position, and the bookkeeping (stats per depth, blocks,
the draft's mirrors) stays consistent. The sampled rule's exactness is tested in
``test_speculative.py`` (``test_speculative_sampling_matches_target``, the tree case) and, on the
rule alone, in ``tests/decoding/test_tree_speculative.py``.

Models as in ``test_speculative.py``: the real stories260K as target; a draft that is stories260K
with noise on its weights (often but not always right: its second choice is often the
target's first), and a random 1-layer Llama (a poor draft).
"""

from __future__ import annotations

import pytest
import torch

from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.kv_cache import KVCache
from metagen.engine.kv_quant import read_dequantized
from metagen.engine.models.loader import load_model
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL

from .test_speculative import PROMPTS, engine, hf_greedy, setup  # noqa: F401 (a fixture)


def noisy_draft(stories_path, scale: float = 0.15):
    model = load_model(stories_path)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in model.parameters():
            w.add_(torch.randn(w.shape, generator=gen) * scale * w.std())
    return model


def tree_engine(target_model, draft_model, tree, k: int = 4, native: bool = True):
    proposer = DraftModelProposer(engine(draft_model, 128), tree=tree)
    eng = engine(target_model, 128, proposer=proposer, k=k)
    if not native:
        eng._sample_rows = proposer.draft._sample_rows = None
    return eng, proposer


@pytest.mark.parametrize("tree, draft_kind, native", [
    ((2, 1, 1), "noisy", True), ((3,), "noisy", False), ((1, 1, 1, 1), "bad", True),
], ids=["2-1-1 noisy", "3 noisy pytorch-argmax", "1-1-1-1 bad"])
def test_tree_greedy_equals_plain_greedy(setup, stories_path, tree, draft_kind,  # noqa: F811
                                         native) -> None:
    tok, hf, target_model, bad_model = setup
    prompts = [tok(p).input_ids for p in PROMPTS]
    n = 40
    draft_model = noisy_draft(stories_path) if draft_kind == "noisy" else bad_model
    eng, proposer = tree_engine(target_model, draft_model, tree, native=native)
    params = SamplingParams(temperature=0, max_tokens=n, logprobs=1 if not native else None)
    out = eng.generate(prompts, params)
    plain = engine(target_model, 128).generate(prompts, params)
    for ids, got, ref in zip(prompts, out, plain):
        assert list(got.outputs[0].token_ids) == hf_greedy(hf, ids, n)
        # each emitted token's logprob from its node's row (a leaf's bonus from the leaf's)
        assert got.outputs[0].logprobs == pytest.approx(ref.outputs[0].logprobs,
                                                        abs=FLOAT_LOGPROB_TOL)
    stats = eng.speculator.stats
    if draft_kind == "noisy":  # leaves really carried rounds (the poor draft's never do)
        assert stats.leaves_accepted > 0
    assert sum(stats.accepted_at) == stats.accepted
    assert all(a <= t for a, t in zip(stats.accepted_at, stats.tested))
    assert eng.counters.generated_tokens == n * len(prompts)
    eng.check_integrity()
    assert not proposer.draft.requests
    proposer.draft.check_integrity()


def _configured(target_model, draft_model, tree, **config):
    """A tree engine whose target runs with the ``EngineConfig`` fields ``config``."""
    from metagen.engine.build import build_engine
    from metagen.engine.speculative_decoding import Speculator

    proposer = DraftModelProposer(engine(draft_model, 256), tree=tree)
    eng = build_engine(target_model, None, EngineConfig(device="cpu", **config),
                       speculator=Speculator(proposer, 4))
    return eng, proposer


@pytest.mark.parametrize("case", ["rows in prefix groups", "a tight token budget",
                                  "an end token mid-round"])
def test_tree_rows_in_groups_budgets_and_stops(setup, stories_path, case) -> None:  # noqa: F811
    """Greedy equals plain greedy where tree rows meet the engine's other paths: three
    requests of each prompt, whose rows share the prompt's cached blocks as Hydragen prefix
    groups (``hydragen_min_prefix`` 0); a token budget of 7 tokens a
    step, so ``Speculator.fit`` cuts the leaves (and then the chain) of rows the step cannot
    hold; an end token that an accepted path reaches before the round's last token."""
    tok, hf, target_model, _ = setup
    draft_model = noisy_draft(stories_path, 0.3)
    n = 30
    prompts = [tok(p).input_ids for p in PROMPTS]
    refs = [hf_greedy(hf, ids, n) for ids in prompts]
    if case == "rows in prefix groups":
        eng, proposer = _configured(target_model, draft_model, (2, 1, 1), num_blocks=256,
                                    block_size=4, hydragen_min_prefix=0)
        params = SamplingParams(temperature=0, max_tokens=n)
        eng.generate(prompts, params)  # the prompts' blocks go to the prefix cache
        rows = eng.runner.hydragen_rows
        out = eng.generate([ids for ids in prompts for _ in range(3)], params)
        assert [list(o.outputs[0].token_ids) for o in out] == [r for r in refs for _ in range(3)]
        assert eng.runner.hydragen_rows > rows  # the three copies' rows attended as groups
    elif case == "a tight token budget":
        eng, proposer = _configured(target_model, draft_model, (2, 2, 2, 2), num_blocks=256,
                                    block_size=8, max_num_batched_tokens=7)
        out = eng.generate(prompts, SamplingParams(temperature=0, max_tokens=n))
        assert [list(o.outputs[0].token_ids) for o in out] == refs
    else:
        eos = refs[0][9]  # the 10th greedy token as the end token
        eng, proposer = _configured(target_model, draft_model, (2, 1, 1), num_blocks=256,
                                    block_size=8)
        eng.eos_token_ids = (eos,)
        out = eng.generate(prompts[:1], SamplingParams(temperature=0, max_tokens=n))
        assert list(out[0].outputs[0].token_ids) == refs[0][:refs[0].index(eos) + 1]
        assert out[0].outputs[0].finish_reason == "stop"
    assert eng.speculator.stats.rounds > 0
    eng.check_integrity()
    assert not proposer.draft.requests
    proposer.draft.check_integrity()


def test_tree_beats_chain_on_tokens_per_round(setup, stories_path) -> None:  # noqa: F811
    """With a draft whose second choice is often the target's first, a tree's rounds emit
    more tokens than a chain's of the same depth (the leaves' only purpose; greedy, so both
    runs emit the same tokens)."""
    tok, _, target_model, _ = setup
    prompts = [tok(p).input_ids for p in PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=40)
    per_round = []
    for tree in ((), (2, 2, 2, 2)):
        eng, _ = tree_engine(target_model, noisy_draft(stories_path, 0.3), tree)
        eng.generate(prompts, params)
        stats = eng.speculator.stats
        per_round.append(stats.emitted / stats.tested[0])  # tokens per row's round
    assert per_round[1] > per_round[0]


def test_move_entry_float_and_int8() -> None:
    """``KVCache.move_entry``: a float32 entry is copied bit for bit in every layer; an int8
    one lands within half a quantization step of its source block (its stored value) plus half
    of its destination block's (written again: write_quantized, the scale grown where the
    value needs it) of the value first written, and the destination block's earlier entries
    keep their values within half of the grown step."""
    gen = torch.Generator().manual_seed(0)
    layers, blocks, bs, hkv, d = 2, 4, 4, 2, 8
    x = torch.randn(layers, blocks * bs, hkv, d, generator=gen)
    for dtype in (torch.float32, torch.int8):
        kv = KVCache(layers, blocks, bs, hkv, d, dtype, "cpu")
        if dtype == torch.float32:
            kv.k.view(layers, -1, hkv, d).copy_(x)
            kv.v.view(layers, -1, hkv, d).copy_(-x)
            kv.move_entry(13, 5)  # block 3 offset 1 -> block 1 offset 1
            assert torch.equal(kv.k.view(layers, -1, hkv, d)[:, 5], x[:, 13])
            assert torch.equal(kv.v.view(layers, -1, hkv, d)[:, 5], -x[:, 13])
            continue
        from metagen.engine.kv_quant import write_quantized
        assert kv.scales is not None
        slots = torch.arange(blocks * bs)
        xk = x * 0.1
        xk[:, 12:16] *= 10  # K: block 3's values are 10x block 1's: block 1's scale must grow
        for layer in range(layers):
            write_quantized(kv.k[layer], kv.scales[0][layer], slots, xk[layer])
            write_quantized(kv.v[layer], kv.scales[1][layer], slots, x[layer])
        old_k = kv.scales[0][:, 1].clone()
        before = read_dequantized(kv.k[0], kv.scales[0][0], torch.tensor([4]), None,
                                  torch.float32)
        kv.move_entry(13, 5)
        assert (kv.scales[0][:, 1] > old_k).any()  # the grown case is exercised
        for layer in range(layers):
            for cache, scales, src in ((kv.k, kv.scales[0], xk[layer, 13]),
                                       (kv.v, kv.scales[1], x[layer, 13])):
                got = read_dequantized(cache[layer], scales[layer], torch.tensor([5]), None,
                                       torch.float32)[0]
                bound = (scales[layer][3] + scales[layer][1]) / 2  # source's + destination's
                assert ((got - src).abs() <= bound[:, None] + 1e-6).all()
        after = read_dequantized(kv.k[0], kv.scales[0][0], torch.tensor([4]), None,
                                 torch.float32)
        assert ((after - before).abs() <= kv.scales[0][0][1][None, :, None] / 2 + 1e-6).all()


def test_tree_settings_are_checked() -> None:
    for bad in ((1, 2, 3, 4, 5), (-1,), (1.5,), (17,), "2,1"):
        with pytest.raises(InvalidParameterError, match="speculative_tree"):
            EngineConfig(speculative_model="x", num_speculative_tokens=4, speculative_tree=bad)
    with pytest.raises(InvalidParameterError, match="speculative_tree"):
        EngineConfig(prompt_lookup=3, speculative_tree=(2,))
    assert EngineConfig(speculative_model="x", speculative_tree=[2, 1]).speculative_tree == (2, 1)
