"""Beam searches as requests of the engine (continuous batching, fork, prefix cache) against
transformers.

Beam search must return exactly transformers' ``generate(num_beams=...)`` sequences (and scores
to 1e-4) on the real stories260K and on a random-weight Llama built here from ``LlamaConfig``;
two prompts run in one batch. Diverse beam search is checked against the pure bookkeeping driven
by full transformers forwards (transformers 5 moved group beam search out of the library, to a
Hub ``custom_generate`` repository, so there is no in-library reference to compare with);
stochastic beam for its invariants.
"""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.beam_params import BeamSearchParams
from metagen.decoding.beam import BeamParams, BeamState, beam_step, best_hypotheses, diversity_penalty
from metagen.engine.beam_search import beam_search, stochastic_beam_search
from metagen.engine.config import EngineConfig
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models.loader import load_model
from metagen.errors import InvalidParameterError, InvalidPromptError


def session(model, num_blocks: int, block_size: int, eos=(), prefix_cache: bool = True
            ) -> LLMEngine:
    """An engine over ``model`` whose end tokens are ``eos``."""
    eng = build_engine(model, None, EngineConfig(num_blocks=num_blocks, block_size=block_size,
                                              prefix_cache=prefix_cache, device="cpu"))
    eng.eos_token_ids = tuple(eos)
    return eng


@pytest.fixture(scope="module")
def models(stories_path, tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    rnd = tmp_path_factory.mktemp("rnd_llama")
    LlamaForCausalLM(cfg).save_pretrained(rnd)
    tok = AutoTokenizer.from_pretrained(stories_path)
    out = {}
    for name, path in (("stories", stories_path), ("random", rnd)):
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        out[name] = (hf, load_model(path))
    return tok, out


def hf_beam(hf, ids, **kw):
    x = torch.tensor([ids])
    return hf.generate(x, attention_mask=torch.ones_like(x), do_sample=False, pad_token_id=1,
                       output_scores=True, return_dict_in_generate=True, **kw)


CASES = [
    ("stories", dict(num_beams=4, length_penalty=1.0, early_stopping=False, eos=(426,))),
    ("stories", dict(num_beams=3, length_penalty=0.5, early_stopping=True, eos=(426, 432))),
    ("stories", dict(num_beams=4, length_penalty=2.0, early_stopping="never", eos=(426,))),
    ("random", dict(num_beams=4, length_penalty=1.0, early_stopping=False, eos=(5,))),
    ("random", dict(num_beams=5, length_penalty=-0.5, early_stopping=True, eos=(5, 7))),
]


@pytest.mark.parametrize("name,case", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_engine_beam_search_equals_transformers(models, name: str, case: dict) -> None:
    tok, ms = models
    hf, model = ms[name]
    if name == "stories":
        prompts = [tok("Once upon a time, there was a").input_ids, tok("Tom had a big").input_ids]
    else:
        prompts = [[1, 17, 42, 3, 9, 11, 60, 2, 33, 21], [1, 80, 14]]
    max_new = 20
    params = BeamSearchParams(num_beams=case["num_beams"], max_tokens=max_new,
                              num_return_sequences=2, length_penalty=case["length_penalty"],
                              early_stopping=case["early_stopping"])
    engine = session(model, num_blocks=96, block_size=4, eos=case["eos"])
    results = beam_search(engine, prompts, params)
    for ids, hyps in zip(prompts, results):
        ref = hf_beam(hf, ids, num_beams=case["num_beams"], num_return_sequences=2,
                      length_penalty=case["length_penalty"], early_stopping=case["early_stopping"],
                      max_new_tokens=max_new, eos_token_id=list(case["eos"]))
        for hyp, seq, score in zip(hyps, ref.sequences, ref.sequences_scores):
            gen = seq[len(ids):].tolist()
            assert gen[:len(hyp.tokens)] == list(hyp.tokens)
            assert all(t == 1 for t in gen[len(hyp.tokens):])
            assert hyp.score == pytest.approx(score.item(), rel=1e-4, abs=1e-4)
    engine.check_integrity()
    assert engine.blocks.num_used == engine.radix.num_cached_blocks  # no leaked beam


def test_beam_search_prefix_cache_off_same_result(models) -> None:
    tok, ms = models
    _, model = ms["stories"]
    ids = [tok("Once upon a time").input_ids]
    params = BeamSearchParams(num_beams=4, max_tokens=12, num_return_sequences=4)
    on = beam_search(session(model, 64, 4, (426,), prefix_cache=True), ids, params)
    off = beam_search(session(model, 64, 4, (426,), prefix_cache=False), ids, params)
    assert [h.tokens for h in on[0]] == [h.tokens for h in off[0]]


def _pure_diverse(hf, ids, params):
    groups = [BeamState(params.group_size) for _ in range(params.num_beam_groups)]
    while not all(g.done for g in groups):
        chosen = []
        for gi, state in enumerate(groups):
            if state.done:
                continue
            with torch.no_grad():
                logits = hf(torch.tensor([ids + list(r) for r in state.running])).logits[:, -1]
            lp = diversity_penalty(torch.log_softmax(logits.float(), -1), chosen,
                                   params.diversity_penalty)
            groups[gi], move = beam_step(state, lp, params)
            chosen.extend(move.tokens)
    return best_hypotheses(groups, params.num_return_sequences)


def test_engine_diverse_beam_equals_pure_driver(models) -> None:
    tok, ms = models
    hf, model = ms["stories"]
    ids = tok("Once upon a time").input_ids
    params = BeamSearchParams(num_beams=6, max_tokens=10, num_return_sequences=6,
                              num_beam_groups=3, diversity_penalty=1.5)
    got = beam_search(session(model, 96, 4, (426,)), [ids], params)[0]
    ref = _pure_diverse(hf, ids, BeamParams.of(params, (426,)))
    assert [h.tokens for h in got] == [h.tokens for h in ref]
    assert len({h.tokens for h in got}) == 6


def test_engine_stochastic_beam_samples_distinct_and_reproducible(models) -> None:
    tok, ms = models
    _, model = ms["stories"]
    ids = tok("Once upon a time, there was a").input_ids
    params = BeamSearchParams(num_beams=8, max_tokens=6)
    engine = session(model, 128, 4, (426,))
    a = stochastic_beam_search(engine, [ids, ids], params, seed=3)
    b = stochastic_beam_search(engine, [ids], params, seed=3)
    assert a[0].beams == b[0].beams  # per-prompt randomness: batch-independent
    assert len(set(a[0].beams)) == 8 and a[0].beams != a[1].beams
    assert list(a[0].keys) == sorted(a[0].keys, reverse=True)
    for beam in a[0].beams:
        assert len(beam) == 6 or beam[-1] == 426
    engine.check_integrity()


def test_beam_search_rejects_bad_requests(models) -> None:
    _, ms = models
    _, model = ms["random"]
    with pytest.raises(InvalidPromptError):
        beam_search(session(model, 16, 4), [[]], BeamSearchParams(num_beams=2, max_tokens=3))
    for bad, name in ((dict(num_beams=0), "num_beams"), (dict(num_beams=65), "num_beams"),
                      (dict(num_beams=2, num_return_sequences=3), "num_return_sequences"),
                      (dict(num_beams=4, num_beam_groups=3), "num_beam_groups"),
                      (dict(num_beams=4, diversity_penalty=-1.0), "diversity_penalty"),
                      (dict(num_beams=4, early_stopping="sometimes"), "early_stopping"),
                      (dict(num_beams=4, num_beam_groups=2, stochastic=True), "num_beam_groups"),
                      (dict(num_beams=True), "num_beams")):
        with pytest.raises(InvalidParameterError, match=name):
            BeamSearchParams(**bad)
    engine = session(model, 16, 4)
    with pytest.raises(InvalidParameterError, match="num_beams"):  # beams cannot fit the cache
        engine.add_request([1, 2, 3], BeamSearchParams(num_beams=8, max_tokens=20))
    with pytest.raises(InvalidParameterError, match="max_tokens"):
        engine.add_request([1, 2, 3], BeamSearchParams(num_beams=1, max_tokens=300))
    assert not engine.requests
