"""Engine-wide speculative decoding: greedy == plain greedy; sampling follows the target.

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

from metagen.engine.build import build_engine
from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models.loader import load_model
from metagen.engine.models.quantize import quantization_of, quantize_model
from metagen.engine.proposers import NgramProposer, ngram_lookup
from metagen.engine.speculative_decoding import Speculator
from metagen.errors import InvalidParameterError
from metagen.types import SamplingParams
from tests.tolerances import FLOAT_LOGPROB_TOL


def engine(model, num_blocks: int, block_size: int = 8, proposer=None, k: int = 4, eos=(),
           tokenizer=None, adaptive: bool = False) -> LLMEngine:
    """An engine over ``model`` (end tokens ``eos``) speculating with ``proposer`` (with
    ``adaptive``: k chosen per row, a draft step costing 0.5 target steps)."""
    eng = build_engine(model, tokenizer, EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                                   device="cpu",
                                                   quantization=quantization_of(model)),
                    speculator=None if proposer is None else Speculator(
                        proposer, k, adaptive=adaptive, draft_cost=0.5 * adaptive))
    eng.eos_token_ids = tuple(eos)
    return eng


def draft(model, num_blocks: int = 128, block_size: int = 8) -> DraftModelProposer:
    return DraftModelProposer(engine(model, num_blocks, block_size))

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
    if proposer_kind == "ngram":
        proposer = NgramProposer(max_ngram=3)
    else:
        proposer = draft(target_model if proposer_kind == "self" else bad_model)
    target = engine(target_model, 128, proposer=proposer)
    out = target.generate(prompts, SamplingParams(temperature=0, max_tokens=n))
    for ids, got in zip(prompts, out):
        assert list(got.outputs[0].token_ids) == hf_greedy(hf, ids, n)
    stats = target.speculator.stats
    if proposer_kind == "self":
        assert stats.acceptance_rate == 1.0 and set(stats.acceptance_by_depth) == {1.0}
    assert stats.proposed > 0 and stats.rounds < n * len(prompts)
    assert sum(stats.accepted_at) == stats.accepted  # every accepted draft at its depth
    assert target.counters.generated_tokens == n * len(prompts)
    target.check_integrity()
    if proposer_kind != "ngram":  # the draft's mirrors were released with their targets
        assert not proposer.draft.requests
        proposer.draft.check_integrity()


@pytest.mark.parametrize("params", [
    SamplingParams(temperature=0, max_tokens=30),
    SamplingParams(temperature=0, max_tokens=30, min_tokens=12, logprobs=2),  # general rule
], ids=["plain", "min_tokens+logprobs"])
def test_speculative_greedy_native_argmax_equals_the_pytorch_path(setup, stories_path,
                                                                 params) -> None:
    """A greedy round's draft steps and verification through the native argmax pass (one pass
    per row: the draft's token, the verified positions' argmax and raw logprob) give the tokens
    of the engines without native kernels, and logprobs equal to float32 rounding; a row that
    lists its top-k takes the general rule either way."""
    tok, _, target_model, _ = setup
    prompts = [tok(p).input_ids for p in PROMPTS]
    noisy = load_model(stories_path)  # a draft that agrees often but not always
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in noisy.parameters():
            w.add_(torch.randn(w.shape, generator=gen) * 0.15 * w.std())
    runs = []
    for native in (True, False):
        proposer = draft(noisy)
        target = engine(target_model, 128, proposer=proposer, eos=(2,))
        if target.row_kernels() is None:
            pytest.skip("no native library on this machine")
        if not native:
            target._sample_rows = proposer.draft._sample_rows = None
        runs.append(target.generate(prompts, params))
        stats = target.speculator.stats
        assert 0 < stats.accepted < stats.proposed  # drafts both accepted and rejected
    for a, b in zip(*runs):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].logprobs == pytest.approx(b.outputs[0].logprobs, abs=FLOAT_LOGPROB_TOL)


def test_speculative_stops_at_eos_and_max_tokens(setup) -> None:
    tok, hf, target_model, _ = setup
    ids = tok("Once upon a time").input_ids
    ref = hf_greedy(hf, ids, 30)
    eos = ref[7]  # treat the 8th greedy token as EOS
    for proposer in (NgramProposer(), draft(target_model, 64)):
        target = engine(target_model, 64, proposer=proposer, k=5, eos=[eos])
        out = target.generate([ids], SamplingParams(temperature=0, max_tokens=30))[0]
        assert list(out.outputs[0].token_ids) == ref[:ref.index(eos) + 1]
        assert out.outputs[0].finish_reason == "stop"
        target.check_integrity()


def test_speculative_rejects_bad_settings(setup) -> None:
    with pytest.raises(InvalidParameterError, match="num_speculative_tokens"):
        Speculator(NgramProposer(), -1)
    with pytest.raises(InvalidParameterError, match="adaptive"):
        Speculator(NgramProposer(), 2, adaptive=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="draft_cost"):
        Speculator(NgramProposer(), 2, adaptive=True, draft_cost=-0.5)
    with pytest.raises(InvalidParameterError, match="adaptive_speculation"):
        EngineConfig(prompt_lookup=3, adaptive_speculation="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="num_speculative_tokens"):
        EngineConfig(prompt_lookup=3, num_speculative_tokens=0)
    with pytest.raises(InvalidParameterError, match="prompt_lookup"):
        EngineConfig(prompt_lookup=0)
    with pytest.raises(InvalidParameterError, match="prompt_lookup"):
        EngineConfig(prompt_lookup=3, speculative_model="x")
    with pytest.raises(InvalidParameterError, match="speculative_quantization"):
        EngineConfig(speculative_model="x",
                     speculative_quantization="int3")  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="speculative_quantization"):
        EngineConfig(prompt_lookup=3, speculative_quantization="int8")


def test_requests_speculation_cannot_serve_decode_normally(setup, stories_path) -> None:
    """Mirostat decodes normally; stop strings, logprobs and n > 1 work with speculation: a
    greedy request equals the plain engine's token for token, and logprobs agree."""
    tok, _, target_model, _ = setup
    ids = tok("Once upon a time").input_ids
    plain = engine(target_model, 256, eos=(2,), tokenizer=tok)
    spec = engine(target_model, 256, proposer=draft(target_model), eos=(2,), tokenizer=tok)
    params = [SamplingParams(mirostat_tau=3.0, seed=5, max_tokens=20),
              SamplingParams(temperature=0, max_tokens=40, stop=["Lily"], logprobs=2),
              SamplingParams(temperature=0.8, n=3, seed=7, max_tokens=20)]
    a, b = plain.generate([ids] * 3, params), spec.generate([ids] * 3, params)
    # mirostat: not speculated, the same seeded sample (logprobs to float32 batch rounding)
    assert a[0].outputs[0].token_ids == b[0].outputs[0].token_ids
    ca, cb = a[1].outputs[0], b[1].outputs[0]
    assert (ca.text, ca.token_ids, ca.finish_reason, ca.stop_reason) == \
        (cb.text, cb.token_ids, cb.finish_reason, cb.stop_reason)
    assert ca.logprobs == pytest.approx(cb.logprobs, abs=FLOAT_LOGPROB_TOL)
    assert [set(t) for t in ca.top_logprobs] == [set(t) for t in cb.top_logprobs]
    assert len(b[2].outputs) == 3 and all(len(c.token_ids) == 20 for c in b[2].outputs)
    assert spec.speculator.stats.accepted > 0
    spec.check_integrity()


def test_adaptive_speculation_stops_drafting_where_no_round_pays(setup) -> None:
    """A draft of random weights, at 0.5 target steps a draft step: its first round drafts one
    token (prior acceptance 0.7: 1.7 tokens for 1.6 steps) and the target rejects it; the
    estimate falls to 0.31 (0.56 accepted against 1.24 rejected, decay 0.8), where one draft
    gives 1.31 tokens for 1.6 steps, less than a plain step's 1 for 1: the row then decodes
    without drafts and drafts one token every ``probe_every`` = 30 steps (a probe's 0.6 steps
    spread at 0.02 a token; one accepted probe lifts the estimate to 0.59: 1.59 tokens for 1.6
    steps, still no round; two in a row restart). So 1 + ~63 / 30 rounds for 64 tokens, against a
    round every step with a fixed k; the tokens are plain greedy's either way."""
    tok, _, target_model, bad_model = setup
    ids = tok("Once upon a time").input_ids
    n = 64
    params = SamplingParams(temperature=0, max_tokens=n)
    plain = engine(target_model, 256).generate([ids], params)[0].outputs[0].token_ids
    for adaptive in (True, False):
        spec = engine(target_model, 256, proposer=draft(bad_model), k=4, adaptive=adaptive)
        assert spec.generate([ids], params)[0].outputs[0].token_ids == plain
        rounds = spec.speculator.stats.rounds
        if adaptive:
            assert spec.speculator.probe_every == 30
            assert 2 <= rounds <= 2 + n // 30, rounds
        else:
            assert rounds > n // 2, rounds


def test_spec_stats_count_acceptance_per_depth_golden() -> None:
    """Rounds of (proposed, accepted): a draft at depth d is tested when the d before it were
    accepted; the first miss is tested and not accepted; drafts after it are never tested."""
    from metagen.engine.speculative_decoding import SpecStats

    stats = SpecStats()
    for proposed, accepted in [(4, 2), (4, 4), (3, 0), (2, 1), (0, 0)]:
        stats.add_round(proposed, accepted)
    assert (stats.proposed, stats.accepted) == (13, 7)
    assert stats.tested == [4, 3, 2, 1] and stats.accepted_at == [3, 2, 1, 1]
    assert stats.acceptance_by_depth == [0.75, 2 / 3, 0.5, 1.0]


def test_ngram_lookup_golden() -> None:
    assert ngram_lookup([1, 2, 3, 4, 1, 2], 2) == [3, 4]
    assert ngram_lookup([5, 1, 2, 9, 1, 2, 7, 1, 2], 3) == [7, 1, 2]  # most recent occurrence
    assert ngram_lookup([1, 2, 3], 2) == []
    assert ngram_lookup([7, 7], 3) == [7]
    assert ngram_lookup([], 2) == [] and ngram_lookup([4], 2) == []
    assert ngram_lookup([1, 1], 0) == []


def test_ngram_lookup_equals_a_start_by_start_scan() -> None:
    """Against the definition, written as the plain scan (longest n first, then the most recent
    earlier start): random token lists over a small vocabulary (so that n-grams recur and
    overlap), every k, n-gram range and length from 0 to 60."""
    def scan(tokens: list[int], k: int, max_n: int, min_n: int) -> list[int]:
        if k <= 0:
            return []
        for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
            for start in range(len(tokens) - n - 1, -1, -1):
                if tokens[start:start + n] == tokens[len(tokens) - n:]:
                    return tokens[start + n:start + n + k]
        return []

    gen = torch.Generator().manual_seed(0)
    for trial in range(600):
        n_tok = trial % 61
        vocab = 2 + trial % 5
        tokens = torch.randint(0, vocab, (n_tok,), generator=gen).tolist()
        k, max_n = trial % 6, 1 + trial % 4
        min_n = 1 + (trial // 4) % max_n
        assert ngram_lookup(tokens, k, max_n, min_n) == scan(tokens, k, max_n, min_n), (
            tokens, k, max_n, min_n)


def _exact_three_token_law(hf, ids: list[int], top_k: int, temperature: float
                           ) -> dict[tuple[int, int, int], float]:
    """p(x1, x2, x3) under top-k sampling at ``temperature``, from transformers' logits."""
    def dist(prefix):
        with torch.no_grad():
            logits = hf(torch.tensor([prefix])).logits[0, -1].double()
        vals, idx = logits.topk(top_k)
        return dict(zip(idx.tolist(), torch.softmax(vals / temperature, -1).tolist()))
    law = {}
    for a, pa in dist(ids).items():
        for b, pb in dist(ids + [a]).items():
            for c, pc in dist(ids + [a, b]).items():
                law[(a, b, c)] = pa * pb * pc
    return law


@pytest.mark.parametrize("proposer_kind, adaptive", [("bad", False), ("ngram", False),
                                                     ("bad", True), ("bad int8", False),
                                                     ("bad tree", False)])
def test_speculative_sampling_matches_target(setup, stories_path, proposer_kind: str,
                                             adaptive: bool) -> None:
    """With ``adaptive`` (a draft step costing 0.5 target steps), a row's first round drafts 1
    token (the prior acceptance 0.7 pays for no more), so x2 and x3 come from one round or two
    instead of one round of 2 drafts: the law of (x1, x2, x3) is the target's either way. A
    tree (``bad tree``: two leaves beside the first draft, one beside the second, drawn from q
    without replacement) verifies them by recursive rejection sampling: the same law."""
    tok, hf, target_model, _ = setup
    noisy = load_model(stories_path)  # a draft that agrees often but not always
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for w in noisy.parameters():
            w.add_(torch.randn(w.shape, generator=gen) * 0.15 * w.std())
    if proposer_kind == "bad int8":  # q is what the int8 draft sampled from: still exact
        quantize_model(noisy, "int8")
    ids = tok("Once upon a time, there was a little").input_ids
    n, top_k, temperature = 3000, 4, 1.5
    law = _exact_three_token_law(hf, ids, top_k, temperature)
    proposer = (NgramProposer(max_ngram=2) if proposer_kind == "ngram" else
                DraftModelProposer(engine(noisy, 1024, 16), tree=(2, 1))
                if proposer_kind == "bad tree" else draft(noisy, 1024, 16))
    target = engine(target_model, 1024, 16, proposer=proposer, k=3, adaptive=adaptive)
    # the first token is sampled after the prefill; x2 and x3 come from one verification round
    # (two drafts: accepted, or rejected and resampled, then the bonus token)
    params = [SamplingParams(temperature=temperature, top_k=top_k, max_tokens=4, seed=1234 + i)
              for i in range(n)]  # one seed per request: independent samples
    outs = target.generate([ids] * n, params)
    stats = target.speculator.stats
    counts: dict[tuple[int, ...], int] = {}
    for o in outs:
        key = tuple(o.outputs[0].token_ids[:3])
        counts[key] = counts.get(key, 0) + 1
    assert set(counts) <= set(law)
    # cells expected fewer than 5 times are pooled into one (chi-square's usual condition)
    small = [key for key, p in law.items() if n * p < 5]
    cells = [([key], p) for key, p in law.items() if n * p >= 5]
    cells.append((small, sum(law[key] for key in small)))
    stat = sum((sum(counts.get(k, 0) for k in keys) - n * p) ** 2 / (n * p)
               for keys, p in cells if p > 0)
    df = len([c for c in cells if c[1] > 0]) - 1
    a = 2.0 / (9.0 * df)
    crit = df * (1.0 - a + 4.7534 * math.sqrt(a)) ** 3
    assert stat < crit, (stat, crit)
    if proposer_kind != "ngram":
        assert 0 < stats.accepted < stats.proposed  # the rule really rejected and accepted
    if proposer_kind == "bad tree":
        assert stats.leaves_accepted > 0  # and leaves carried rounds
    if adaptive:  # one draft in a row's first round, at most one more after a rejection
        assert stats.proposed < 2 * n
    elif proposer_kind != "ngram":  # two drafts in every row's first round (max_tokens: no more)
        assert stats.proposed >= 2 * n
