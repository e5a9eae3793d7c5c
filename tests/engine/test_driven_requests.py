"""Beam-search and speculative requests share the one engine core with ordinary requests:
they run in the same steps, each equals its result alone, and the block refcounts and radix
cache hold afterwards; an aborted beam or speculative request frees everything it held."""

from __future__ import annotations

import pytest

from metagen.engine.build import build_engine
from metagen.beam_params import BeamSearchParams
from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models.loader import load_model
from metagen.engine.speculative_decoding import Speculator
from metagen.types import SamplingParams


@pytest.fixture(scope="module")
def stories(stories_path):
    from transformers import AutoTokenizer

    return load_model(stories_path), AutoTokenizer.from_pretrained(stories_path)


def _engine(model, tok=None, speculator=None, num_blocks=256) -> LLMEngine:
    return build_engine(model, tok, EngineConfig(block_size=4, num_blocks=num_blocks, device="cpu"),
                     speculator=speculator)


def _settled(engine: LLMEngine) -> None:
    engine.check_integrity()
    assert not engine.requests and not engine.scheduler.has_work()
    held = engine.radix.num_cached_blocks if engine.radix is not None else 0
    assert engine.blocks.num_used == held  # nothing but the prefix cache holds a block


def test_beam_and_sampling_requests_share_steps_and_equal_alone(stories) -> None:
    model, tok = stories
    ids = [tok(p).input_ids for p in ("Once upon a time", "Tom had a big", "The sun was")]
    beam = BeamSearchParams(num_beams=4, max_tokens=16, num_return_sequences=2)
    greedy = SamplingParams(temperature=0, max_tokens=20)
    sampled = SamplingParams(temperature=1.0, n=2, seed=11, max_tokens=20)
    alone = [_engine(model, tok).generate([p], [sp])[0]
             for p, sp in zip(ids, (beam, greedy, sampled))]
    engine = _engine(model, tok)
    rids = [engine.add_request(p, sp) for p, sp in zip(ids, (beam, greedy, sampled))]
    mixed_steps = 0
    while engine.scheduler.has_work():
        batch_reqs = {s.request.request_id for s in engine.scheduler.running}
        mixed_steps += rids[0] in batch_reqs and len(batch_reqs) > 1
        engine.step()
    assert mixed_steps >= 10  # the beam request ran in the same steps as the others
    engine2 = _engine(model, tok)
    together = engine2.generate(ids, [beam, greedy, sampled])
    for a, b in zip(alone, together):
        assert [c.token_ids for c in a.outputs] == [c.token_ids for c in b.outputs]
        assert [c.text for c in a.outputs] == [c.text for c in b.outputs]
    assert len(together[0].outputs) == 2
    assert together[0].outputs[0].cumulative_logprob >= together[0].outputs[1].cumulative_logprob
    _settled(engine)
    _settled(engine2)


def test_speculative_engine_serves_beam_and_sampling_requests(stories) -> None:
    model, tok = stories
    ids = [tok(p).input_ids for p in ("Once upon a time", "Tom had a big")]
    beam = BeamSearchParams(num_beams=3, max_tokens=12)
    greedy = SamplingParams(temperature=0, max_tokens=30)
    plain = _engine(model, tok).generate(ids, [beam, greedy])
    draft = _engine(model)
    spec = _engine(model, tok, Speculator(DraftModelProposer(draft), 3))
    got = spec.generate(ids, [beam, greedy])
    assert [c.token_ids for c in got[0].outputs] == [c.token_ids for c in plain[0].outputs]
    assert got[1].outputs[0].token_ids == plain[1].outputs[0].token_ids
    assert spec.speculator.stats.accepted > 0
    _settled(spec)
    _settled(draft)


@pytest.mark.parametrize("kind", ["beam", "stochastic", "speculative"])
def test_aborted_driven_request_frees_everything(stories, kind: str) -> None:
    model, tok = stories
    ids = tok("Once upon a time, there was a").input_ids
    draft = _engine(model) if kind == "speculative" else None
    engine = _engine(model, tok, None if draft is None else
                     Speculator(DraftModelProposer(draft), 4))
    params = (SamplingParams(temperature=0, max_tokens=60) if kind == "speculative" else
              BeamSearchParams(num_beams=4, max_tokens=40, stochastic=kind == "stochastic"))
    other = engine.add_request(tok("Tom had").input_ids, SamplingParams(temperature=0,
                                                                        max_tokens=40))
    rid = engine.add_request(ids, params)
    for _ in range(6):
        engine.step()
    assert len(engine.requests[rid].seqs) >= 1
    engine.abort(rid)
    engine.check_integrity()
    assert rid not in engine.requests
    assert all(s.request.request_id == other for s in engine.scheduler.running)
    engine.run_until_done([other])
    _settled(engine)
    if draft is not None:
        _settled(draft)
