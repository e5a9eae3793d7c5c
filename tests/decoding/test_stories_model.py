"""decode_step driving the real stories260K model (through transformers' forward) against
transformers' own generate()."""

from __future__ import annotations

import pytest
import torch

from metagen.decoding import SequenceState, decode_step
from metagen.types import SamplingParams

STEPS = 24


@pytest.fixture(scope="module")
def model_and_tok(stories_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(stories_path, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(stories_path)
    return model, tok


@torch.no_grad()
def next_logits(model, seqs: list[SequenceState]) -> torch.Tensor:
    # one forward per sequence (no padding), so the logits of a row never depend on the batch
    rows = [model(torch.tensor([s.prompt_ids + s.output_ids])).logits[0, -1] for s in seqs]
    return torch.stack(rows)  # (B, V)


def decode(model, seqs: list[SequenceState], steps: int = STEPS) -> None:
    for _ in range(steps):
        out = decode_step(next_logits(model, seqs), seqs)
        assert not out.errors
        for s, t in zip(seqs, out.tokens.tolist()):
            s.append(t)


@pytest.mark.parametrize("extra", [
    {},
    {"repetition_penalty": 1.3},
    {"no_repeat_ngram_size": 2},
    {"repetition_penalty": 0.8, "no_repeat_ngram_size": 3},
])
def test_greedy_equals_transformers_generate(model_and_tok, extra):
    model, tok = model_and_tok
    ids = tok("Once upon a time", return_tensors="pt").input_ids
    ref = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                         max_new_tokens=STEPS, min_new_tokens=STEPS, pad_token_id=0, **extra)
    ref_out = ref[0, ids.shape[1]:].tolist()
    seq = SequenceState(SamplingParams(temperature=0.0, max_tokens=STEPS, min_tokens=STEPS,
                                       **extra), ids[0].tolist(), eos_token_ids=(2,))
    decode(model, [seq])
    assert seq.output_ids == ref_out
    if not extra:
        text = tok.decode(ids[0].tolist() + seq.output_ids, skip_special_tokens=True)
        assert text.startswith("Once upon a time, there was a little girl named Lily.")


def test_seeded_samples_identical_alone_and_in_any_batch(model_and_tok):
    model, tok = model_and_tok
    prompt = tok("Once upon a time", return_tensors="pt").input_ids[0].tolist()
    other = tok("The cat", return_tensors="pt").input_ids[0].tolist()
    params = SamplingParams(n=3, temperature=0.9, top_p=0.95, seed=2024, max_tokens=STEPS)
    noisy = SamplingParams(temperature=1.2, top_k=20, repetition_penalty=1.1)
    alone = []
    for i in range(3):
        s = SequenceState(params, list(prompt), sample_index=i)
        decode(model, [s], 12)
        alone.append(s.output_ids)
    assert len({tuple(a) for a in alone}) > 1
    mine = [SequenceState(params, list(prompt), sample_index=i) for i in (1, 2, 0)]
    batch = [SequenceState(noisy, list(other)), mine[0], SequenceState(noisy, list(prompt)),
             mine[1], mine[2]]
    decode(model, batch, 12)
    assert [m.output_ids for m in mine] == [alone[1], alone[2], alone[0]]
