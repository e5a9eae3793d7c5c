"""Direct draft steps (metagen.engine.direct_steps) against the step loop they replace: the same
drafts and the same draft KV, round after round, for float32 and int8 drafts, one and two rows
(different k), greedy rows with and without logits processing; greedy speculation through them
equals plain greedy; a failing direct step aborts only its mirrors.

Model: the real stories260K (512-token vocabulary) as the draft, on its own engine, fed the
token lists a target would hand it (each round: some drafts accepted, then a new token)."""

from __future__ import annotations

import pytest
import torch

from metagen.engine.build import build_engine
from metagen.decoding import SequenceState
from metagen.engine.config import EngineConfig
from metagen.engine.draft_proposer import DraftModelProposer
from metagen.engine.llm_engine import LLMEngine
from metagen.engine.models.loader import load_model
from metagen.engine.models.quantize import quantization_of
from metagen.engine.speculative_decoding import Speculator
from metagen.types import SamplingParams

PROMPTS = [[1, 403, 407, 261, 378, 412, 284, 442, 306, 383, 285, 263, 356, 283, 427, 45, 260, 30],
           [1, 365, 319, 260, 474, 305, 284, 258, 353, 272, 448, 270, 355, 44]]


def _engine(model, num_blocks: int = 64, proposer=None) -> LLMEngine:
    cfg = EngineConfig(num_blocks=num_blocks, block_size=8, device="cpu",
                       quantization=quantization_of(model))
    return build_engine(model, None, cfg, speculator=None if proposer is None else
                     Speculator(proposer, 4))


@pytest.fixture(scope="module", params=[None, "int8"])
def draft_model(request, stories_path):
    return load_model(stories_path, quantization=request.param)


class _CountingSteps:
    """Counts the draft engine's step-loop steps."""

    def __init__(self, engine: LLMEngine) -> None:
        self.n, self._step = 0, engine.step
        engine.step = self  # type: ignore[method-assign]

    def __call__(self):
        self.n += 1
        return self._step()


def _kv_of(proposer: DraftModelProposer, key: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The draft KV of ``key``'s mirror, position by position: (L, computed, Hkv, D) each."""
    eng = proposer.draft
    seq = eng.requests[proposer.mirrors._rids[key]].seqs[0]
    bs, n = eng.config.block_size, seq.num_computed_tokens
    slots = torch.tensor([seq.block_table[p // bs] * bs + p % bs for p in range(n)])
    k = eng.kv.k.flatten(1, 2).index_select(1, slots)
    v = eng.kv.v.flatten(1, 2).index_select(1, slots)
    return k, v


@pytest.mark.parametrize("rows,params", [
    (1, SamplingParams(temperature=0, max_tokens=200)),
    (2, SamplingParams(temperature=0, max_tokens=200)),
    (2, SamplingParams(temperature=0, max_tokens=200, repetition_penalty=1.3,
                       ignore_eos=True)),
])
def test_direct_rounds_equal_step_loop_rounds(draft_model, rows: int,
                                              params: SamplingParams) -> None:
    loop = DraftModelProposer(_engine(draft_model), direct=False)
    direct = DraftModelProposer(_engine(draft_model))
    counted = _CountingSteps(direct.draft)
    tokens = [list(p) for p in PROMPTS[:rows]]
    ks = [4, 2][:rows]
    for r in range(10):
        states = [SequenceState(params, t[:len(PROMPTS[j])], t[len(PROMPTS[j]):])
                  for j, t in enumerate(tokens)]
        a = loop.propose(list(range(rows)), tokens, states, ks)
        b = direct.propose(list(range(rows)), tokens, states, ks)
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.num_draft, b.num_draft)
        assert a.probs is None and b.probs is None
        assert int(b.num_draft.min()) > 0
        for key in range(rows):
            ka, va = _kv_of(loop, key)
            kb, vb = _kv_of(direct, key)
            assert torch.equal(ka, kb) and torch.equal(va, vb)  # bit for bit
        for j in range(rows):  # the target accepts some drafts, then emits its own token
            keep = (r + j) % (int(b.num_draft[j]) + 1)
            tokens[j] += b.tokens[j, :keep].tolist() + [(37 * r + 11 * j) % 500 + 3]
    assert counted.n == 1  # the first round prefills the new mirrors; the others are direct
    for p in (loop, direct):
        p.draft.check_integrity()


def test_greedy_speculation_through_direct_steps_equals_plain(draft_model, stories_path
                                                              ) -> None:
    target_model = load_model(stories_path)
    plain = _engine(target_model, 128).generate(
        PROMPTS, SamplingParams(temperature=0, max_tokens=40))
    proposer = DraftModelProposer(_engine(draft_model, 128))
    counted = _CountingSteps(proposer.draft)
    spec = _engine(target_model, 128, proposer)
    out = spec.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=40))
    assert [o.outputs[0].token_ids for o in out] == [o.outputs[0].token_ids for o in plain]
    assert spec.speculator.stats.rounds > 5 and counted.n <= 2
    spec.check_integrity()
    proposer.draft.check_integrity()
    assert not proposer.draft.requests


def test_failing_direct_step_aborts_its_mirrors(stories_path) -> None:
    model = load_model(stories_path)
    proposer = DraftModelProposer(_engine(model))
    params = SamplingParams(temperature=0, max_tokens=200)
    tokens = [list(p) for p in PROMPTS]
    states = [SequenceState(params, t, []) for t in tokens]
    proposer.propose([0, 1], tokens, states, [3, 3])
    runner = proposer.draft.runner

    def broken(reqs):
        raise MemoryError("injected")

    runner.extend = broken  # type: ignore[method-assign]
    tokens = [t + [5] for t in tokens]
    with pytest.raises(MemoryError):
        proposer.propose([0, 1], tokens, states, [3, 3])
    assert not proposer.draft.requests  # both mirrors aborted, their blocks freed
    proposer.draft.check_integrity()
    del runner.extend
    again = proposer.propose([0, 1], tokens, states, [3, 3])  # mirrors recreated
    assert again.num_draft.tolist() == [3, 3]
    proposer.draft.check_integrity()
