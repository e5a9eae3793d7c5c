"""Speculative decoding on the engine: greedy == plain greedy; sampling follows the target.

Models: the real stories260K as target; drafts are stories260K itself (perfect draft) and a
random-weight 1-layer Llama with the same vocabulary (a poor draft) and stories260K with noise
added to its weights (a draft that is often but not always right). The statistical test uses a
chi-square goodness-of-fit test at significance 1e-6 (Wilson-Hilferty critical value): a correct
implementation fails with probability ~1e-6 for a fresh seed; the seed is fixed, so it is
deterministic.
"""

from __future__ import annotations

import math

import pytest
import torch

from metagen.engine.models.loader import load_model
from metagen.engine.proposers import DraftModelProposer, NgramProposer, ngram_lookup
from metagen.engine.speculative_decoding import PagedSession, SpecStats, speculative_generate
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams

PROMPTS = ["Once upon a time", "Lily and Tom went to the park. Lily and Tom",
           "The cat sat on the mat. The cat"]


@pytest.fixture(scope="module")
def setup(stories_path, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    tok = AutoTokenizer.from_pretrained(stories_path)
    hf = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    bad = tmp_path_factory.mktemp("bad_draft")
    LlamaForCausalLM(cfg).save_pretrained(bad)
    return tok, hf, load_model(stories_path), load_model(bad)


def hf_greedy(hf, ids: list[int], n: int) -> list[int]:
    x = torch.tensor([ids])
    out = hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, max_new_tokens=n,
                      eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


@pytest.mark.parametrize("proposer_kind", ["self", "bad", "ngram"])
def test_speculative_greedy_equals_plain_greedy(setup, proposer_kind: str) -> None:
    tok, hf, target_model, bad_model = setup
    prompts = [tok(p).input_ids for p in PROMPTS]
    n = 40
    target = PagedSession(target_model, num_blocks=128, block_size=8)
    if proposer_kind == "ngram":
        proposer = NgramProposer(max_ngram=3)
    else:
        draft = target_model if proposer_kind == "self" else bad_model
        proposer = DraftModelProposer(PagedSession(draft, num_blocks=128, block_size=8))
    stats = SpecStats()
    out = speculative_generate(target, proposer, prompts, SamplingParams(temperature=0,
                               max_tokens=n), num_speculative_tokens=4, stats=stats)
    for ids, got in zip(prompts, out):
        assert got == hf_greedy(hf, ids, n)
    if proposer_kind == "self":
        assert stats.acceptance_rate == 1.0
    assert stats.emitted == n * len(prompts)
    target.blocks.check_integrity()
    target.radix.check_integrity()


def test_speculative_stops_at_eos_and_max_tokens(setup) -> None:
    tok, hf, target_model, _ = setup
    ids = tok("Once upon a time").input_ids
    ref = hf_greedy(hf, ids, 30)
    eos = ref[7]  # treat the 8th greedy token as EOS
    target = PagedSession(target_model, num_blocks=64, block_size=8)
    out = speculative_generate(target, NgramProposer(), [ids],
                               SamplingParams(temperature=0, max_tokens=30), 5, eos_token_ids=[eos])
    assert out[0] == ref[:ref.index(eos) + 1]


def test_speculative_rejects_bad_settings(setup) -> None:
    _, _, target_model, _ = setup
    target = PagedSession(target_model, num_blocks=16)
    with pytest.raises(InvalidParameterError, match="num_speculative_tokens"):
        speculative_generate(target, NgramProposer(), [[1, 2]], SamplingParams(), -1)
    with pytest.raises(InvalidParameterError, match="mirostat"):
        speculative_generate(target, NgramProposer(), [[1, 2]], SamplingParams(mirostat_tau=3.0))
    with pytest.raises(InvalidParameterError, match="stop"):
        speculative_generate(target, NgramProposer(), [[1, 2]], SamplingParams(stop=["."]))
    with pytest.raises(InvalidParameterError, match="n="):
        speculative_generate(target, NgramProposer(), [[1, 2]], SamplingParams(n=2))


def test_ngram_lookup_golden() -> None:
    assert ngram_lookup([1, 2, 3, 4, 1, 2], 2) == [3, 4]
    assert ngram_lookup([5, 1, 2, 9, 1, 2, 7, 1, 2], 3) == [7, 1, 2]  # most recent occurrence
    assert ngram_lookup([1, 2, 3], 2) == []
    assert ngram_lookup([7, 7], 3) == [7]


def _exact_two_token_law(hf, ids: list[int], top_k: int, temperature: float
                         ) -> dict[tuple[int, int], float]:
    """p(x1, x2) under top-k sampling at ``temperature``, from transformers' logits."""
    def dist(prefix):
        with torch.no_grad():
            logits = hf(torch.tensor([prefix])).logits[0, -1].double()
        vals, idx = logits.topk(top_k)
        return dict(zip(idx.tolist(), torch.softmax(vals / temperature, -1).tolist()))
    law = {}
    for a, pa in dist(ids).items():
        for b, pb in dist(ids + [a]).items():
            law[(a, b)] = pa * pb
    return law


@pytest.mark.parametrize("proposer_kind", ["bad", "ngram"])
def test_speculative_sampling_matches_target(setup, stories_path, proposer_kind: str) -> None:
    tok, hf, target_model, _ = setup
    noisy = load_model(stories_path)  # a draft that agrees often but not always
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in noisy.parameters():
            w.add_(torch.randn(w.shape, generator=gen) * 0.15 * w.std())
    ids = tok("Once upon a time, there was a little").input_ids
    n, top_k, temperature = 3000, 4, 1.5
    law = _exact_two_token_law(hf, ids, top_k, temperature)
    target = PagedSession(target_model, num_blocks=2 * n + 64, block_size=16)
    proposer = (NgramProposer(max_ngram=2) if proposer_kind == "ngram" else
                DraftModelProposer(PagedSession(noisy, num_blocks=2 * n + 64, block_size=16)))
    params = SamplingParams(temperature=temperature, top_k=top_k, max_tokens=2, seed=1234)
    stats = SpecStats()
    outs = speculative_generate(target, proposer, [ids] * n, params, 3, stats=stats)
    counts: dict[tuple[int, int], int] = {}
    for o in outs:
        counts[tuple(o)] = counts.get(tuple(o), 0) + 1
    assert set(counts) <= set(law)
    stat = sum((counts.get(key, 0) - n * p) ** 2 / (n * p) for key, p in law.items())
    df = len(law) - 1
    a = 2.0 / (9.0 * df)
    crit = df * (1.0 - a + 4.7534 * math.sqrt(a)) ** 3
    assert stat < crit, (stat, crit)
    if proposer_kind == "bad":
        assert 0 < stats.accepted < stats.proposed  # the rule really rejected and accepted
