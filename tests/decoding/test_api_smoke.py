"""The public API of metagen.decoding exists with the agreed shapes (teammates code against it)."""

from __future__ import annotations

import torch

from metagen.decoding import (
    SequenceState, StepOutput, decode_step, log_softmax_rows, probs_for_sampling, process_logits,
    uniform_for,
)
from metagen.errors import NumericalError
from metagen.types import SamplingParams


def test_decode_step_shapes_and_error_row():
    torch.manual_seed(0)
    seqs = [SequenceState(SamplingParams(temperature=0.7, top_p=0.9, seed=3, logprobs=3), [1, 2]),
            SequenceState(SamplingParams(temperature=0.0), [1]),
            SequenceState(SamplingParams(seed=1, mirostat_tau=2.0), [1])]
    logits = torch.randn(3, 20)
    logits[1, 3] = float("nan")
    out = decode_step(logits, seqs)
    assert isinstance(out, StepOutput)
    assert out.tokens.shape == (3,) and out.tokens.dtype == torch.int64
    assert out.logprobs.shape == (3,) and out.logprobs.dtype == torch.float32
    assert out.tokens[1] == -1 and isinstance(out.errors[1], NumericalError)
    assert set(out.errors) == {1}
    assert len(out.top_logprobs[0]) == 3 and out.top_logprobs[2] is None
    assert seqs[2].mirostat_mu is not None
    assert process_logits(logits, seqs).shape == (3, 20)
    assert probs_for_sampling(logits, seqs).shape == (3, 20)
    assert log_softmax_rows(logits).shape == (3, 20)
    assert 0.0 <= uniform_for(1, 2, 3) < 1.0
